"""Facts about the host CPU(s) that do not depend on the instruction set.

Topology (sockets, cores, hardware threads), cache sizes and memory are read
from the same kernel interfaces on x86 and arm64, so both CPU backends build
their device properties from `host_properties`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

from .cpuinfo import PROC_CPUINFO, CpuInfo


@dataclasses.dataclass(frozen=True)
class HostPaths:
    """Where the kernel publishes CPU facts; tests point these at fixture files."""

    cpuinfo: Path = PROC_CPUINFO
    meminfo: Path = Path("/proc/meminfo")
    cpu_sysfs: Path = Path("/sys/devices/system/cpu")


_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int | None:
    """Bytes of a sysfs size such as "32K" or "32768K"; None when it is not one."""
    match = _SIZE.match(text)
    if match is None:
        return None
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPU numbers of a kernel CPU list such as "0-3,8,10-11"."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def memory_total_bytes(meminfo_text: str) -> int | None:
    """``MemTotal`` of /proc/meminfo in bytes (the kernel prints kB)."""
    for line in meminfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "MemTotal":
            return parse_size(value.replace("kB", "K"))
    return None


def cache_sizes(cpu_dir: Path) -> dict[str, int]:
    """Cache sizes in bytes of one logical CPU, keyed "L1d", "L1i", "L2", "L3"."""
    sizes: dict[str, int] = {}
    for index in sorted((cpu_dir / "cache").glob("index*")):
        level, kind, size = (_read(index / name) for name in ("level", "type", "size"))
        nbytes = parse_size(size) if size else None
        if not level or nbytes is None:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind or "", "")
        sizes[f"L{level}{suffix}"] = nbytes
    return sizes


def usable_cpus() -> frozenset[int] | None:
    """The logical CPUs this process may run on (taskset, cgroups), if the OS says."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None


def host_properties(info: CpuInfo, paths: HostPaths, usable: frozenset[int] | None) -> dict[str, Any]:
    """Device properties every CPU backend reports.

    ``cores`` (physical cores this process may use) is what SOL sizes its
    thread pools by: hardware threads of one core share its SIMD units, so
    they rarely speed up the dense loops SOL generates.
    """
    all_cpus = info.cpu_ids()
    usable = frozenset(all_cpus) if usable is None else usable
    core_of = _core_keys(info, paths.cpu_sysfs, all_cpus)
    mine = sorted(usable & set(all_cpus))
    props: dict[str, Any] = {
        # When the listed CPUs and the affinity mask disagree (virtualised
        # /proc/cpuinfo), the affinity mask is the truth about what may run.
        "cores": len({core_of[c] for c in mine}) if mine else len(usable),
        "threads": len(mine) if mine else len(usable),
        "physical_cores": len(set(core_of.values())),
        "logical_cpus": len(all_cpus),
        "sockets": _socket_count(info, paths.cpu_sysfs, all_cpus),
    }
    caches = cache_sizes(paths.cpu_sysfs / f"cpu{mine[0] if mine else 0}")
    if caches:
        props["cache_bytes"] = caches
    meminfo = _read(paths.meminfo)
    memory = memory_total_bytes(meminfo) if meminfo else None
    if memory:
        props["memory_bytes"] = memory
    return props


def _core_keys(info: CpuInfo, cpu_sysfs: Path, cpus: Iterable[int]) -> dict[int, Hashable]:
    """One key per physical core for each logical CPU (hardware threads share it)."""
    blocks = info.by_cpu()
    keys: dict[int, Hashable] = {}
    for cpu in cpus:
        block = blocks.get(cpu, {})
        if "physical id" in block and "core id" in block:  # x86 kernels print both
            keys[cpu] = ("socket-core", block["physical id"], block["core id"])
            continue
        siblings = _read(cpu_sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list")
        # no topology known: count every logical CPU as a core
        keys[cpu] = ("siblings", parse_cpu_list(siblings)) if siblings else ("cpu", cpu)
    return keys


def _socket_count(info: CpuInfo, cpu_sysfs: Path, cpus: Iterable[int]) -> int:
    sockets = set(info.distinct("physical id"))
    if not sockets:
        for cpu in cpus:
            package = _read(cpu_sysfs / f"cpu{cpu}" / "topology" / "physical_package_id")
            if package is not None:
                sockets.add(package)
    return max(len(sockets), 1)


def _read(path: Path) -> str | None:
    """A small kernel file's stripped text, or None when it is absent or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
