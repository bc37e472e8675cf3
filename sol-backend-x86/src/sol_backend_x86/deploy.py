"""``sol.deploy`` for x86-64: standalone libraries built with g++ and OpenMP.

`GccDeployTarget` describes any GCC toolchain whose target runs SOL's
generic OpenMP C++ flavour; sol-backend-arm64 subclasses it for the
cross-compiler. The library is generated with the library-free DFP mode of
the generic CPU flavour: convolutions and matrix products are SOL's own
loop nests, so a deployed library never needs oneDNN (nor any library
beyond libc, libm and libgomp) on the machine it ships to.
"""

from __future__ import annotations

import platform
import shlex
from typing import Any, ClassVar

from sol.records import DeployTarget

NO_ONEDNN = ("oneDNN is avoided: the library runs SOL's generated DFP loops for every layer, so the target machine "
             "needs no oneDNN; it needs only libc, libm and libgomp (the OpenMP runtime of GCC)")


class GccDeployTarget(DeployTarget):
    """A GCC toolchain (``<prefix>g++`` and ``<prefix>`` binutils) building the generic CPU flavour."""

    #: the codegen flavour's name (the ``sol_<name>_*`` math macros); the device type by default
    flavour_name: ClassVar[str] = ""

    def compiler(self) -> list[str]:
        return ["g++"]

    def flavour(self) -> Any:
        from sol.codegen import CpuFlavour  # lazy: importing the plugin must stay cheap

        # Only the loop mapping and prelude of the flavour are used; the deploy driver compiles itself.
        return CpuFlavour(self.flavour_name or self.device_type, cc=shlex.join(self.compiler()), cflags="")


class X86DeployTarget(GccDeployTarget):
    device_type = "x86"
    description = "x86-64 Linux CPUs (g++, OpenMP)"
    install_hint = "apt install g++ (Debian/Ubuntu) or dnf install gcc-c++ (Fedora/RHEL)"
    options: ClassVar[dict[str, str]] = {"gcc::march": "native", "gcc::mtune": "native"}
    notes = (NO_ONEDNN,)

    def emulator(self) -> list[str] | None:
        # Built programs run here when this machine is an x86-64 one; elsewhere they need an x86 machine.
        return [] if platform.machine().lower() in {"x86_64", "amd64"} else None
