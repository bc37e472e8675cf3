"""The native ARM64 path, exercised on any machine through recorded /proc/cpuinfo files."""

from __future__ import annotations

import json
import platform

import pytest
import sol
from sol_backend_arm64.backend import Arm64Backend, cpu_name, probe_host
from sol_backend_x86.cpuinfo import parse_cpuinfo
from sol_backend_x86.host import HostPaths


def graviton3(fixtures, tmp_path) -> HostPaths:
    return HostPaths(
        cpuinfo=fixtures / "cpuinfo_aarch64_graviton3.txt",
        meminfo=fixtures / "meminfo_16g.txt",
        cpu_sysfs=tmp_path / "no-sysfs",
    )


def test_native_graviton3(fixtures, tmp_path):
    vector_length = tmp_path / "sve_default_vector_length"
    vector_length.write_text("32\n")
    result = probe_host("aarch64", graviton3(fixtures, tmp_path), frozenset(range(4)), vector_length)
    (device,) = result.devices
    assert (device.id, device.name, device.backend) == ("arm64:0", "ARM Neoverse-V1", "arm64")
    assert device.properties == {
        "vendor": "ARM",
        "isa": ["asimd", "fphp", "asimdhp", "asimddp", "asimdfhm", "i8mm", "bf16", "sve", "svei8mm", "svebf16"],
        "cores": 4,
        "threads": 4,
        "physical_cores": 4,
        "logical_cpus": 4,
        "sockets": 1,
        "memory_bytes": 16087796 * 1024,
        "sve_vector_bits": 256,
    }
    json.dumps(device.to_dict())


def test_sve_length_is_optional(fixtures, tmp_path):
    (device,) = probe_host("arm64", graviton3(fixtures, tmp_path), None, tmp_path / "absent").devices
    assert "sve_vector_bits" not in device.properties
    assert device.properties["cores"] == 4


def test_big_little_soc(fixtures, tmp_path):
    paths = HostPaths(cpuinfo=fixtures / "cpuinfo_aarch64_rk3588.txt", meminfo=tmp_path / "x", cpu_sysfs=tmp_path)
    (device,) = probe_host("aarch64", paths, frozenset(range(8)), tmp_path / "absent").devices
    assert device.name == "ARM Cortex-A55 + ARM Cortex-A76"
    assert device.properties["isa"] == ["asimd", "fphp", "asimdhp", "asimddp"]
    assert device.properties["cores"] == 8


def test_model_name_wins_where_the_kernel_prints_one():
    info = parse_cpuinfo("processor : 0\nmodel name : ARMv8 Processor  rev 1 (v8l)\nCPU part : 0xd0c\n")
    assert cpu_name(info) == "ARMv8 Processor rev 1 (v8l)"
    assert cpu_name(parse_cpuinfo("processor : 0\n")) == "ARM64 CPU"


def test_other_machines_keep_arm64_as_a_target():
    result = probe_host("x86_64")
    assert result.devices == ()
    assert result.reason == (
        "not an ARM64 machine (x86_64); arm64 stays available as a cross-compilation target for sol.deploy"
    )


def test_unreadable_cpuinfo(tmp_path):
    result = probe_host("aarch64", HostPaths(cpuinfo=tmp_path / "cpuinfo"))
    assert result.reason.startswith(f"cannot read {tmp_path / 'cpuinfo'}")


@pytest.mark.skipif(platform.machine().lower() in {"aarch64", "arm64"}, reason="this machine is ARM64")
def test_this_machine_is_not_arm64():
    result = Arm64Backend().probe()
    assert result.devices == ()
    assert f"({platform.machine()})" in result.reason


def test_versions_name_the_cross_toolchain():
    versions = Arm64Backend().versions()
    assert set(versions) == {"aarch64-linux-gnu-g++", "qemu-aarch64"}
    assert all(isinstance(v, str) and v for v in versions.values())


def test_versions_say_how_to_install_missing_tools():
    sol.config["arm64::cxx"] = "/nonexistent/aarch64-linux-gnu-g++"
    sol.config["arm64::qemu"] = "no-such-qemu-aarch64"
    try:
        versions = Arm64Backend().versions()
    finally:
        del sol.config["arm64::cxx"]
        del sol.config["arm64::qemu"]
    assert versions == {
        "aarch64-linux-gnu-g++": "not installed (apt install g++-aarch64-linux-gnu)",
        "no-such-qemu-aarch64": "not installed (apt install qemu-user)",
    }
