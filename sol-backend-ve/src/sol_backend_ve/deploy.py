"""``sol.deploy`` for the VE: a library that runs on the VE itself, called by a program running there.

With NEC's nc++ the target builds both kinds (``lib::shared``, ``lib::static``)
with nc++ and NEC's binutils (nar, nnm, nobjcopy, nreadelf). Without it,
``lib::static`` builds an archive of VE objects with upstream LLVM's VE
target (clang-14) and LLVM's binutils; a shared library needs the VE's libc
and linker setup, which only NEC's SDK has.

The library's code is the VE flavour's (no system header), and so is its
wrapper: the generic ``deploy_library.j2`` reads the weights with stdio and
guards initialisation with pthreads, so the VE wrapper embeds the weights
(the parameters are taken from memory), declares the three libc functions
it calls (posix_memalign, free, abort, plus write for its one error message)
and uses compiler atomics instead of pthreads.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from sol.errors import SolBuildError, SolInputError
from sol.records import DeployLibraries, DeployTarget

from . import toolchain

#: LLVM's binutils of the clang-14 release (versioned names first, as Debian/Ubuntu install them)
#: the VE library's template (package data): sol-core's deploy_library.j2 with the VE's blocks
WRAPPER = Path(__file__).with_name("native") / "deploy_library_ve.j2"
LLVM_TOOLS = ("llvm-{name}-14", "llvm-{name}", "/usr/lib/llvm-14/bin/llvm-{name}")
INSTALL_HINT = ("NEC's SDK (nc++ and its binutils in /opt/nec/ve/bin; sol.config['ve::cxx'] names nc++) for shared and "
                "static libraries, or, for target='lib::static' only, LLVM's VE target: apt-get install clang-14 llvm-14")
CLANG_NOTE = ("built by clang-14's VE target (no nc++ here): link the archive into a VE program with the OpenMP runtime "
              "the objects call (__kmpc_fork_call, __kmpc_for_static_init_8 & co.: LLVM's libomp built for the VE, "
              "-lomp), the VE's libm (expf, erff & co., -lm) and libc (posix_memalign, free, abort, write)")
NCC_NOTE = ("built by nc++: link with nc++ -fopenmp (NEC's OpenMP runtime) and -lm; the library needs only the VE's "
            "libc, libm and OpenMP runtime")


class VeDeployTarget(DeployTarget):
    device_type = "ve"
    description = "NEC SX-Aurora VE programs (nc++; clang-14's VE target for static archives)"
    install_hint = INSTALL_HINT
    options: ClassVar[dict[str, str]] = {}

    # -- the toolchain at hand ----------------------------------------------------------
    def ncc(self) -> str | None:
        return toolchain.find_cxx(toolchain.configured_cxx())

    def compiler(self) -> list[str]:
        ncc = self.ncc()
        if ncc is not None:
            return [ncc]
        return [toolchain.find_clang() or toolchain.CLANG, toolchain.CLANG_TARGET]

    def tool(self, name: str) -> str:
        ncc = self.ncc()
        if ncc is not None:  # NEC's binutils beside nc++: nar, nnm, nobjcopy, nreadelf
            return str(Path(ncc).parent / f"n{name}")
        for pattern in LLVM_TOOLS:
            found = shutil.which(pattern.format(name=name))
            if found:
                return found
        return LLVM_TOOLS[0].format(name=name)

    def check_kind(self, kind: str, options: Mapping[str, str]) -> None:
        """A shared library needs nc++; a weights file would need stdio on the VE (the wrapper embeds them)."""
        if options.get("weights", "embedded") != "embedded":
            raise SolInputError("sol.deploy for ve embeds the weights in the library (the VE code reads no files); "
                                "use options={'weights': 'embedded'}")
        if kind == "shared" and self.ncc() is None:
            raise SolBuildError(f"target='lib::shared' for ve needs NEC's nc++ ({toolchain.configured_cxx()!r} is "
                                "not installed; install NEC's SDK or set sol.config['ve::cxx']). Without it, "
                                "target='lib::static' builds an archive of VE objects with clang-14")

    # -- what the library's code is ------------------------------------------------------
    def flavour(self, options: Mapping[str, str]) -> Any:
        from .flavour import VeFlavour  # lazy: importing the plugin stays cheap

        # Only the code generation of the flavour is used (its deploy_wrapper is render_wrapper's); the
        # deploy driver compiles with compiler() and flags(). Deployed libraries are library-free (no vednn call:
        # the program linking them needs nothing beyond OpenMP and libm).
        return VeFlavour(emulate=False, dnn=False)

    def libraries(self, flavour: Any, options: Mapping[str, str]) -> DeployLibraries:
        return DeployLibraries(notes=(NCC_NOTE if self.ncc() is not None else CLANG_NOTE,))


def render_wrapper(**context: Any) -> str:
    """The VE library's source: the model's code plus the C API (`VeFlavour.deploy_wrapper`)."""
    if not context["embedded"]:
        raise SolInputError("sol.deploy for ve embeds the weights; use options={'weights': 'embedded'}")
    from sol.codegen.templates import environment

    return environment().from_string(WRAPPER.read_text()).render(**context)

