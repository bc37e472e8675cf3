from __future__ import annotations

import json
import os
import platform

import pytest
from sol_backend_x86.backend import X86Backend, probe_host
from sol_backend_x86.cpuinfo import read_cpuinfo
from sol_backend_x86.host import HostPaths

on_x86 = pytest.mark.skipif(platform.machine().lower() not in {"x86_64", "amd64"}, reason="not an x86-64 machine")


def test_two_socket_xeon(fixtures, tmp_path):
    paths = HostPaths(
        cpuinfo=fixtures / "cpuinfo_x86_xeon_2s_ht.txt",
        meminfo=fixtures / "meminfo_512g.txt",
        cpu_sysfs=tmp_path,
    )
    result = probe_host("x86_64", paths, usable=frozenset(range(8)))
    (device,) = result.devices
    assert (device.id, device.name, device.backend) == ("x86:0", "Intel(R) Xeon(R) Platinum 8480+", "x86")
    props = device.properties
    assert props["vendor"] == "Intel"
    assert props["isa"] == [
        "sse4_2", "avx", "f16c", "fma", "avx2", "avx_vnni", "avx512f", "avx512cd", "avx512bw", "avx512dq",
        "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
    ]  # fmt: skip
    assert (props["cores"], props["threads"], props["sockets"]) == (4, 8, 2)
    assert props["memory_bytes"] == 527947892 * 1024
    json.dumps(device.to_dict())  # properties must survive the out-of-process probe


def test_amd_sample_has_no_avx512(fixtures, tmp_path):
    paths = HostPaths(cpuinfo=fixtures / "cpuinfo_x86_amd_epyc_kvm.txt", meminfo=tmp_path / "x", cpu_sysfs=tmp_path)
    (device,) = probe_host("AMD64", paths, usable=None).devices
    assert device.properties["vendor"] == "AMD"
    assert device.properties["isa"] == ["sse4_2", "avx", "f16c", "fma", "avx2"]
    assert "memory_bytes" not in device.properties  # unreadable meminfo is skipped, not fatal


def test_other_architectures_report_no_device():
    result = probe_host("aarch64")
    assert result.devices == ()
    assert result.reason == "not an x86-64 machine (aarch64)"


def test_unreadable_or_empty_cpuinfo(tmp_path):
    paths = HostPaths(cpuinfo=tmp_path / "cpuinfo")
    assert probe_host("x86_64", paths).reason.startswith(f"cannot read {tmp_path / 'cpuinfo'}")
    paths.cpuinfo.write_text("")
    assert probe_host("x86_64", paths).reason == f"{paths.cpuinfo} lists no processors"


@on_x86
def test_this_machine():
    (device,) = X86Backend().probe().devices
    info = read_cpuinfo()
    assert device.name == " ".join(info.value("model name").split())
    assert 1 <= device.properties["cores"] <= device.properties["threads"] == len(os.sched_getaffinity(0))
    assert device.properties["memory_bytes"] > 0
    assert "sse4_2" in device.properties["isa"]


def test_versions_names_the_compiler_and_onednn():
    versions = X86Backend().versions()
    assert set(versions) == {"g++", "onednn"}
    assert all(isinstance(v, str) and v for v in versions.values())


def test_builds_for_an_avx512_host_prefer_512_bit_vectors(monkeypatch):
    from sol_backend_x86 import flavour

    monkeypatch.setattr(flavour, "host_has_avx512", lambda: True)
    assert flavour.X86Flavour(dnn=False).cflags[-1] == "-mprefer-vector-width=512"
    assert "-mprefer-vector-width=512" in flavour.X86Flavour(dnn=False).toolchain_id()  # part of the cache key
    chosen = flavour.X86Flavour(dnn=False, cflags="-O3 -march=native -mprefer-vector-width=256").cflags
    assert "-mprefer-vector-width=512" not in chosen  # the user's width stays
    assert "-mprefer-vector-width=512" not in flavour.X86Flavour(dnn=False, cflags="-O2 -march=x86-64-v3").cflags
    monkeypatch.setattr(flavour, "host_has_avx512", lambda: False)
    assert "-mprefer-vector-width=512" not in flavour.X86Flavour(dnn=False).cflags
