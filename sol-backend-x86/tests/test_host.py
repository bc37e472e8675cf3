from __future__ import annotations

from pathlib import Path

import pytest
from sol_backend_x86.cpuinfo import parse_cpuinfo, read_cpuinfo
from sol_backend_x86.host import (
    HostPaths,
    cache_sizes,
    host_properties,
    memory_total_bytes,
    parse_cpu_list,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("32K", 32768), ("32768K", 32 * 2**20), ("1M", 2**20), ("512", 512), (" 2G\n", 2 * 2**30), ("lots", None)],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


def test_parse_cpu_list():
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("") == frozenset()


def test_memory_total(fixtures):
    assert memory_total_bytes((fixtures / "meminfo_512g.txt").read_text()) == 527947892 * 1024
    assert memory_total_bytes("MemFree: 1 kB\n") is None


def write_cache(cpu_dir: Path, index: int, level: int, kind: str, size: str) -> None:
    d = cpu_dir / "cache" / f"index{index}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")


def test_cache_sizes(tmp_path):
    cpu0 = tmp_path / "cpu0"
    write_cache(cpu0, 0, 1, "Data", "48K")
    write_cache(cpu0, 1, 1, "Instruction", "32K")
    write_cache(cpu0, 2, 2, "Unified", "2048K")
    write_cache(cpu0, 3, 3, "Unified", "107520K")
    assert cache_sizes(cpu0) == {"L1d": 48 * 1024, "L1i": 32 * 1024, "L2": 2 * 2**20, "L3": 105 * 2**20}
    assert cache_sizes(tmp_path / "cpu9") == {}


def xeon_paths(fixtures: Path, tmp_path: Path) -> HostPaths:
    return HostPaths(
        cpuinfo=fixtures / "cpuinfo_x86_xeon_2s_ht.txt",
        meminfo=fixtures / "meminfo_512g.txt",
        cpu_sysfs=tmp_path / "no-sysfs",
    )


def test_whole_two_socket_host(fixtures, tmp_path):
    paths = xeon_paths(fixtures, tmp_path)
    props = host_properties(read_cpuinfo(paths.cpuinfo), paths, usable=frozenset(range(8)))
    assert props == {
        "cores": 4,
        "threads": 8,
        "physical_cores": 4,
        "logical_cpus": 8,
        "sockets": 2,
        "memory_bytes": 527947892 * 1024,
    }


def test_affinity_limits_cores_not_the_host_totals(fixtures, tmp_path):
    paths = xeon_paths(fixtures, tmp_path)
    info = read_cpuinfo(paths.cpuinfo)
    # CPUs 0 and 4 are the two hardware threads of socket 0, core 0.
    props = host_properties(info, paths, usable=frozenset({0, 4}))
    assert (props["cores"], props["threads"], props["physical_cores"]) == (1, 2, 4)
    props = host_properties(info, paths, usable=frozenset({0, 1, 2}))
    assert (props["cores"], props["threads"]) == (3, 3)


def test_topology_from_sysfs_when_cpuinfo_has_none(tmp_path):
    # arm64 kernels print no "physical id"/"core id": sysfs tells which CPUs share a core.
    info = parse_cpuinfo("".join(f"processor : {n}\n\n" for n in range(4)))
    sysfs = tmp_path / "cpu"
    for cpu, siblings, package in [(0, "0-1", 0), (1, "0-1", 0), (2, "2-3", 1), (3, "2-3", 1)]:
        topo = sysfs / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(siblings + "\n")
        (topo / "physical_package_id").write_text(f"{package}\n")
    write_cache(sysfs / "cpu2", 0, 1, "Data", "64K")
    paths = HostPaths(cpuinfo=tmp_path / "unused", meminfo=tmp_path / "absent", cpu_sysfs=sysfs)
    props = host_properties(info, paths, usable=frozenset({2, 3}))
    assert props == {
        "cores": 1,
        "threads": 2,
        "physical_cores": 2,
        "logical_cpus": 4,
        "sockets": 2,
        "cache_bytes": {"L1d": 64 * 1024},  # of the first CPU this process may use
    }


def test_affinity_outside_listed_cpus_falls_back_to_the_mask(tmp_path):
    # A virtualised /proc/cpuinfo (lxcfs) may list CPUs 0-1 while the mask says 6-7.
    info = parse_cpuinfo("processor : 0\n\nprocessor : 1\n")
    paths = HostPaths(cpuinfo=tmp_path / "x", meminfo=tmp_path / "x", cpu_sysfs=tmp_path)
    props = host_properties(info, paths, usable=frozenset({6, 7}))
    assert (props["cores"], props["threads"], props["logical_cpus"]) == (2, 2, 2)
