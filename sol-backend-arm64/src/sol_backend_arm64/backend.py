"""The arm64 backend: the host's CPU(s) on ARM64 Linux, else a cross-compilation target."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from pathlib import Path

from sol.records import Backend, Device, ProbeResult
from sol_backend_x86.cpuinfo import CpuInfo, read_cpuinfo
from sol_backend_x86.host import HostPaths, host_properties, usable_cpus
from sol_backend_x86.tools import tool_version

from .config import CXX_KEY, QEMU_KEY, configured
from .parts import core_name, vendor_name

ARM64_MACHINES = frozenset({"aarch64", "arm64"})

#: /proc/cpuinfo "Features" that decide which kernels SOL can generate
#: (fphp/asimdhp: fp16 arithmetic; asimddp: int8 dot products)
ISA_FEATURES = (
    "asimd",
    "fphp",
    "asimdhp",
    "asimddp",
    "asimdfhm",
    "i8mm",
    "bf16",
    "sve",
    "sve2",
    "svei8mm",
    "svebf16",
    "sme",
    "sme2",
)

#: bytes of the SVE vector length new processes get (SVE hardware is 128 to 2048 bits wide)
SVE_DEFAULT_VECTOR_LENGTH = Path("/proc/sys/abi/sve_default_vector_length")


def cpu_name(info: CpuInfo) -> str:
    """ "model name" where the kernel prints one, else the core design(s), e.g. "ARM Neoverse-V2"."""
    model = info.value("model name")
    if model:
        return " ".join(model.split())
    names: dict[str, None] = {}
    for proc in info.processors:
        if "CPU implementer" in proc and "CPU part" in proc:
            names.setdefault(core_name(proc["CPU implementer"], proc["CPU part"]), None)
    # big.LITTLE systems list several designs; name each once, in the order the kernel numbers them.
    return " + ".join(names) or "ARM64 CPU"


def probe_host(
    machine: str,
    paths: HostPaths | None = None,
    usable: frozenset[int] | None = None,
    sve_length_file: Path = SVE_DEFAULT_VECTOR_LENGTH,
) -> ProbeResult:
    """The arm64 device of a host whose kernel files are at ``paths`` (all sockets as ``arm64:0``)."""
    if machine.lower() not in ARM64_MACHINES:
        return ProbeResult(
            reason=f"not an ARM64 machine ({machine}); arm64 stays available as a cross-compilation target for sol.deploy"
        )
    paths = paths or HostPaths()
    try:
        info = read_cpuinfo(paths.cpuinfo)
    except OSError as exc:
        return ProbeResult(reason=f"cannot read {paths.cpuinfo}: {exc.strerror or exc}")
    if not info.processors:
        return ProbeResult(reason=f"{paths.cpuinfo} lists no processors")
    features = info.features("Features")
    properties = {
        "vendor": vendor_name(info.value("CPU implementer") or ""),
        "isa": [feature for feature in ISA_FEATURES if feature in features],
        **host_properties(info, paths, usable),
    }
    if "sve" in features:
        try:
            properties["sve_vector_bits"] = int(sve_length_file.read_text().split()[0]) * 8
        except (OSError, ValueError, IndexError):
            pass  # the kernel hides it without CONFIG_ARM64_SVE sysctl; SVE code is length-agnostic anyway
    return ProbeResult(devices=(Device("arm64", 0, cpu_name(info), "arm64", properties),))


class Arm64Backend(Backend):
    name = "arm64"
    description = "ARM64 CPUs (g++/OpenMP; cross-compiles on other machines)"
    host = True

    def probe(self) -> ProbeResult:
        return probe_host(platform.machine(), HostPaths(), usable_cpus())

    def versions(self) -> Mapping[str, str]:
        cxx, qemu = configured(CXX_KEY), configured(QEMU_KEY)
        return {
            Path(cxx).name: tool_version(
                (cxx, "--version"), missing="not installed (apt install g++-aarch64-linux-gnu)"
            ),
            Path(qemu).name: tool_version((qemu, "--version"), missing="not installed (apt install qemu-user)"),
        }
