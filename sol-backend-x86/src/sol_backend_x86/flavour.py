"""The x86 code generation flavour: the generic OpenMP C++ flavour plus oneDNN library calls.

With ``x86::dnn`` on (the default) and oneDNN installed, Conv/ConvTranspose/
Linear/MatMul run as oneDNN primitives (`OneDnnModule`) and the model links
the glue object and libdnnl (rpath to its directory); otherwise the
flavour is exactly the library-free CpuFlavour.
"""

from __future__ import annotations

import sys
from pathlib import Path

import sol
from sol.codegen import CpuFlavour

from . import glue
from .dnnl_module import OneDnnModule
from .onednn import DNN_KEY, LIBRARY_KEY, default_search_dirs, find_library, library_version


def onednn_paths() -> tuple[Path, Path] | None:
    """(libdnnl.so, include directory) of an installed oneDNN with headers, or None."""
    configured = str(sol.config.get(LIBRARY_KEY.name, LIBRARY_KEY.default))
    library = Path(configured).expanduser() if configured else find_library(default_search_dirs())
    if library is None or not library.is_file():
        return None
    include = library.resolve().parent.parent / "include"
    if not (include / "dnnl.hpp").is_file():
        include = Path(sys.prefix) / "include"
    if not (include / "dnnl.hpp").is_file():
        return None
    return library, include


class X86Flavour(CpuFlavour):
    """CpuFlavour("x86") plus the oneDNN DNN module when enabled and available."""

    def __init__(self, dnn: bool | None = None, cc: str | None = None, cflags: str | None = None) -> None:
        super().__init__("x86", cc, cflags)
        wanted = bool(sol.config.get(DNN_KEY.name, True)) if dnn is None else dnn
        self._onednn = onednn_paths() if wanted else None
        if self._onednn is not None:
            self.dnn = OneDnnModule(library_version(self._onednn[0].resolve()))

    def prelude(self) -> str:
        text = super().prelude()
        return text + '#include "sol_dnnl.h"\n' if self.dnn is not None else text

    def compile_command(self, source: Path, library: Path) -> list[str]:
        command = super().compile_command(source, library)
        if self._onednn is None:
            return command
        lib, include = self._onednn
        obj = glue.glue_object(self.cc, include, self.toolchain_id())
        lib_dir = lib.resolve().parent
        return [*command, f"-I{glue.HERE}", f"-I{include}", str(obj), f"-L{lib_dir}", f"-l:{lib.name}",
                f"-Wl,-rpath,{lib_dir}"]

    def toolchain_id(self) -> str:
        base = super().toolchain_id()
        if self._onednn is None:
            return base
        return f"{base}|onednn {self.dnn.key() if self.dnn else ''}|glue {glue.source_hash()[:16]}"
