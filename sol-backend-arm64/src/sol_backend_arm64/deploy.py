"""``sol.deploy`` for ARM64: the x86 backend's GCC target with the (cross) compiler and emulator of ``arm64::``.

On an ARM64 machine the native g++ builds for the host CPU (``-march=native``);
elsewhere ``aarch64-linux-gnu-g++`` cross-compiles for a baseline ARMv8-A
(Advanced SIMD/NEON is part of every ARMv8-A core, so GCC vectorises the
``omp simd`` loops with NEON) and ``qemu-aarch64`` can run the result.
"""

from __future__ import annotations

import platform
import shlex
from pathlib import Path
from typing import ClassVar

from sol_backend_x86.deploy import GccDeployTarget

from .backend import ARM64_MACHINES
from .config import CXX_KEY, QEMU_KEY, configured

CROSS_PACKAGE = "apt install g++-aarch64-linux-gnu (Debian/Ubuntu) or dnf install gcc-c++-aarch64-linux-gnu (Fedora)"
QEMU_PACKAGE = "apt install qemu-user (Debian/Ubuntu) or dnf install qemu-user (Fedora)"


def native() -> bool:
    return platform.machine().lower() in ARM64_MACHINES


class Arm64DeployTarget(GccDeployTarget):
    device_type = "arm64"
    description = "ARM64 Linux CPUs (native g++, or aarch64-linux-gnu-g++ cross-compilation; OpenMP, NEON)"
    install_hint = CROSS_PACKAGE
    # The cross compiler cannot detect the target CPU: default to what every ARMv8-A core runs.
    options: ClassVar[dict[str, str]] = ({"gcc::march": "native", "gcc::mtune": "native"} if native()
                                         else {"gcc::march": "armv8-a", "gcc::mtune": "generic"})

    def compiler(self) -> list[str]:
        return ["g++"] if native() and not _configured_explicitly() else shlex.split(configured(CXX_KEY))

    def binutils_prefix(self) -> str:
        """``aarch64-linux-gnu-`` for ``aarch64-linux-gnu-g++`` (the binutils of the same triplet)."""
        name = Path(self.compiler()[0]).name
        return name[: -len("g++")] if name.endswith("-g++") else ""

    def emulator(self) -> list[str] | None:
        if native():
            return []
        triplet = self.binutils_prefix().rstrip("-")
        # qemu finds the target's dynamic loader and libraries (libc, libgomp) under the cross sysroot.
        sysroot = ["-L", f"/usr/{triplet}"] if triplet and Path(f"/usr/{triplet}").is_dir() else []
        return [*shlex.split(configured(QEMU_KEY)), *sysroot]


def _configured_explicitly() -> bool:
    return configured(CXX_KEY) != CXX_KEY.default
