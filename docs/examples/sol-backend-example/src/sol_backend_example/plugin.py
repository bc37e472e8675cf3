"""The ``example`` device type: a whole SOL backend in one small file.

It exposes the host CPU as a device of its own and compiles SOL's generated
loop code with its own flavour. A real accelerator would change ``probe``
(ask its driver) and ``flavour`` (its compiler, pragmas and math functions);
everything else — IR, passes, fusion, memory planning, caching, the runtime —
is sol-core's job.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess

import sol
from sol.records import Backend, ConfigKey, Device, ProbeResult


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class ExampleBackend(Backend):
    name = "example"  # the device type; equal to the entry-point name
    description = "Example backend: the host CPU through its own flavour (tutorial)"

    def probe(self) -> ProbeResult:
        if shutil.which(sol.config["compiler::cc"]) is None:
            return ProbeResult(reason=f"no C++ compiler {sol.config['compiler::cc']!r} on PATH")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return ProbeResult(devices=(Device("example", 0, _cpu_name(), "example", {"cores": cores}),))

    def versions(self) -> dict[str, str]:
        cc = sol.config["compiler::cc"]
        try:
            out = subprocess.run([cc, "-dumpfullversion"], capture_output=True, text=True, timeout=10, check=True)
            return {cc: out.stdout.strip()}
        except (OSError, subprocess.SubprocessError):
            return {cc: "not installed"}

    def flavour(self):
        """sol-core's generic OpenMP C++ flavour under this device's name, built with its own flags."""
        # the code generator is imported only when compiling: loading a plugin must stay cheap
        from sol.codegen.flavours.cpu import CpuFlavour

        return CpuFlavour(name="example", cflags=sol.config["example::cflags"])


@sol.hookimpl
def sol_backends():
    return [ExampleBackend()]


@sol.hookimpl
def sol_config_keys():
    return [ConfigKey("example::cflags", str, "-O2 -fopenmp", "Compiler flags of the example device's generated code.")]
