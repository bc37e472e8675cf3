"""``sol.deploy`` for x86-64: standalone libraries built with g++ and OpenMP.

`GccDeployTarget` describes any GCC toolchain whose target runs SOL's
generic OpenMP C++ flavour; sol-backend-arm64 subclasses it for the
cross-compiler. By default (``x86::onednn = "avoid"``) the library is
generated with the library-free DFP mode of the flavour: convolutions and
matrix products are SOL's own loop nests, so the library needs nothing
beyond libc, libm and libgomp where it ships to. ``x86::onednn = "ship"``
generates the same code as ``sol.optimize`` (oneDNN primitives for
Conv/Linear/MatMul): SOL's oneDNN glue is linked into the library and
libdnnl is copied beside it, found there at run time through ``$ORIGIN``.
"""

from __future__ import annotations

import platform
import shlex
from collections.abc import Mapping
from typing import Any, ClassVar

from sol.errors import SolBuildError, SolInputError
from sol.records import DeployLibraries, DeployTarget

NO_ONEDNN = ("oneDNN is avoided: the library runs SOL's generated DFP loops for every layer, so the target machine "
             "needs no oneDNN; it needs only libc, libm and libgomp (the OpenMP runtime of GCC)")
ONEDNN_MODES = ("avoid", "ship")


class GccDeployTarget(DeployTarget):
    """A GCC toolchain (``<prefix>g++`` and ``<prefix>`` binutils) building the generic CPU flavour."""

    #: the codegen flavour's name (the ``sol_<name>_*`` math macros); the device type by default
    flavour_name: ClassVar[str] = ""

    def compiler(self) -> list[str]:
        return ["g++"]

    def flavour(self, options: Mapping[str, str]) -> Any:
        from sol.codegen import CpuFlavour  # lazy: importing the plugin must stay cheap

        # Only the loop mapping and prelude of the flavour are used; the deploy driver compiles itself.
        return CpuFlavour(self.flavour_name or self.device_type, cc=shlex.join(self.compiler()), cflags="")

    def libraries(self, flavour: Any, options: Mapping[str, str]) -> DeployLibraries:
        return DeployLibraries(notes=(NO_ONEDNN,))


class X86DeployTarget(GccDeployTarget):
    device_type = "x86"
    description = "x86-64 Linux CPUs (g++, OpenMP; oneDNN optional)"
    install_hint = "apt install g++ (Debian/Ubuntu) or dnf install gcc-c++ (Fedora/RHEL)"
    options: ClassVar[dict[str, str]] = {"gcc::march": "native", "gcc::mtune": "native", "x86::onednn": "avoid"}

    def emulator(self) -> list[str] | None:
        # Built programs run here when this machine is an x86-64 one; elsewhere they need an x86 machine.
        return [] if platform.machine().lower() in {"x86_64", "amd64"} else None

    def flavour(self, options: Mapping[str, str]) -> Any:
        mode = options.get("x86::onednn", "avoid")
        if mode not in ONEDNN_MODES:
            raise SolInputError(f"option x86::onednn={mode!r}: use 'avoid' (library-free DFP code) or 'ship' "
                                "(oneDNN calls, libdnnl copied beside the library)")
        if mode == "avoid":
            return super().flavour(options)
        from .flavour import X86Flavour, onednn_paths

        if onednn_paths() is None:
            raise SolBuildError("option x86::onednn='ship' needs oneDNN with its headers (libdnnl.so and dnnl.hpp; "
                                "e.g. `pip install onednn onednn-devel`, or set x86::onednn_library), or use "
                                "x86::onednn='avoid'")
        return X86Flavour(dnn=True, cc=shlex.join(self.compiler()), cflags="", vector_math=False, blas=False)

    def libraries(self, flavour: Any, options: Mapping[str, str]) -> DeployLibraries:
        if getattr(flavour, "dnn", None) is None:
            return super().libraries(flavour, options)
        from . import glue
        from .flavour import onednn_paths
        from .onednn import library_version

        paths = onednn_paths()
        assert paths is not None  # flavour() checked
        library, include = paths
        note = (f"oneDNN {library_version(library.resolve())} is shipped beside the library (its soname file); "
                "ship both, they find each other through $ORIGIN; libdnnl needs libstdc++, libgomp, libm and libc")
        return DeployLibraries(include_dirs=(glue.HERE, include),
                               objects=(glue.glue_object(shlex.join(self.compiler()), include, flavour.glue_toolchain()),),
                               shipped=(library,), notes=(note,))
