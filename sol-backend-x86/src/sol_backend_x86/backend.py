"""The x86 backend: the host's CPU(s) as one SOL device, and its toolchain."""

from __future__ import annotations

import platform
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import sol
from sol.records import Backend, Device, ProbeResult

from .cpuinfo import read_cpuinfo
from .host import HostPaths, host_properties, usable_cpus
from .onednn import LIBRARY_KEY, onednn_version
from .tools import tool_version

if TYPE_CHECKING:
    from .flavour import X86Flavour

X86_MACHINES = frozenset({"x86_64", "amd64"})

#: /proc/cpuinfo flags that decide which kernels SOL can generate or call, in ISA order
ISA_FLAGS = (
    "sse4_2",
    "avx",
    "f16c",
    "fma",
    "avx2",
    "avx_vnni",
    "avx512f",
    "avx512cd",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "amx_fp16",
)

_VENDORS = {
    "GenuineIntel": "Intel",
    "AuthenticAMD": "AMD",
    "HygonGenuine": "Hygon",
    "CentaurHauls": "Centaur",
    "Shanghai": "Zhaoxin",
}


def probe_host(machine: str, paths: HostPaths | None = None, usable: frozenset[int] | None = None) -> ProbeResult:
    """The x86 device of a host whose kernel files are at ``paths``.

    SOL treats all sockets of the host as one device, ``x86:0``: generated
    code is one OpenMP program that uses every core it may run on.
    """
    if machine.lower() not in X86_MACHINES:
        return ProbeResult(reason=f"not an x86-64 machine ({machine})")
    paths = paths or HostPaths()
    try:
        info = read_cpuinfo(paths.cpuinfo)
    except OSError as exc:
        return ProbeResult(reason=f"cannot read {paths.cpuinfo}: {exc.strerror or exc}")
    if not info.processors:
        return ProbeResult(reason=f"{paths.cpuinfo} lists no processors")
    flags = info.features("flags")
    vendor_id = info.value("vendor_id") or ""
    properties = {
        "vendor": _VENDORS.get(vendor_id.strip(), vendor_id or "unknown"),
        "isa": [flag for flag in ISA_FLAGS if flag in flags],
        **host_properties(info, paths, usable),
    }
    name = " ".join((info.value("model name") or "x86-64 CPU").split())
    return ProbeResult(devices=(Device("x86", 0, name, "x86", properties),))


class X86Backend(Backend):
    name = "x86"
    description = "x86-64 host CPUs (g++/OpenMP, oneDNN)"
    host = True

    def probe(self) -> ProbeResult:
        return probe_host(platform.machine(), HostPaths(), usable_cpus())

    def flavour(self) -> X86Flavour:
        """Code generation for this device: OpenMP C++ with oneDNN library calls (see `X86Flavour`)."""
        from .flavour import X86Flavour  # imports the code generator: only when compiling

        return X86Flavour()

    def versions(self) -> Mapping[str, str]:
        # The compiler SOL builds host code with is a core setting (compiler::cc).
        compiler = shlex.split(str(sol.config.get("compiler::cc", "g++"))) or ["g++"]
        return {
            Path(compiler[0]).name: tool_version((*compiler, "--version")),
            "onednn": onednn_version(str(sol.config.get(LIBRARY_KEY.name, LIBRARY_KEY.default))),
        }
