"""The x86 code generation flavour: the generic OpenMP C++ flavour plus oneDNN library calls.

With ``x86::dnn`` on (the default) and oneDNN installed, Conv/ConvTranspose/
Linear/MatMul run as oneDNN primitives (`OneDnnModule`) and the model links
the glue object and libdnnl (rpath to its directory); otherwise the
flavour is exactly the library-free CpuFlavour.

Vector math: GCC vectorizes ``omp simd`` loops only over functions it has
SIMD variants of, and <cmath>'s exp/tanh/erf/log... have none unless
-ffast-math (which would also drop NaN/Inf semantics). On glibc the
libmvec library has them (``_ZGVdN8v_expf``: eight floats per AVX2 call,
with the scalar functions' special-value behaviour), so the prelude
re-declares those functions with ``__attribute__((simd))`` and the model
links libmvec: softmax, sigmoid/SiLU, GELU, tanh... run 8 lanes wide.
"""

from __future__ import annotations

import ctypes.util
import functools
import re
import sys
import threading
from pathlib import Path

import sol
from sol.codegen import CpuFlavour

from . import glue, mkl
from . import precision as precisions
from .cpuinfo import host_has_avx512
from .dnnl_module import OneDnnModule
from .onednn import DNN_KEY, LIBRARY_KEY, default_search_dirs, find_library, library_version
from .tuning import Tuner


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


@functools.cache
def _build_glue_in_background(cc: str, include: Path, toolchain: str) -> None:
    """Starts building the glue object now, once per process and toolchain.

    A first compile spends ~8 s on it (three C++ sources on two cores). The flavour
    exists before the frontend traces the model, so the build overlaps the tracing
    and the passes. Whoever needs the object first (the autotuner or the linker) waits
    for this build through the cache's lock instead of starting another. A failed
    build is only logged here; that caller builds again and raises the error.
    """

    def build() -> None:
        try:
            glue.glue_object(cc, include, toolchain)
        except Exception as exc:  # noqa: BLE001 - reported by the foreground build
            sol.log.get("x86").debug("background build of the oneDNN glue failed: %s", exc)

    threading.Thread(target=build, name="sol-x86-glue", daemon=True).start()


#: <cmath> functions generated code calls that glibc's libmvec has SIMD variants of (float and double)
VECTOR_MATH = ("exp", "expm1", "log", "log1p", "tanh", "erf", "pow", "sin", "cos", "tan", "asin", "acos", "atan",
               "sinh", "cosh", "asinh", "acosh", "atanh")


@functools.lru_cache(maxsize=1)
def has_libmvec() -> bool:
    """Whether glibc's vector math library is there to link (-lmvec)."""
    return sys.platform.startswith("linux") and ctypes.util.find_library("mvec") is not None


def vector_math_prelude() -> str:
    """Re-declarations that give the math functions libmvec's SIMD variants (GCC on x86-64 glibc only)."""
    lines = ["// libmvec SIMD variants of the math functions, so `omp simd` loops calling them vectorize",
             "#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)",
             'extern "C" {']
    for name in VECTOR_MATH:
        arity = "double, double" if name == "pow" else "double"
        lines.append(f'__attribute__((__simd__("notinbranch"))) double {name}({arity}) noexcept;')
        lines.append(f'__attribute__((__simd__("notinbranch"))) float {name}f({arity.replace("double", "float")}) '
                     "noexcept;")
    return "\n".join([*lines, "}", "#endif", ""])


#: a call of the glue's C API (glue/sol_dnnl.h, glue/sol_dnnl_rnn.h): what generated code calls the libraries through
_GLUE_CALL = re.compile(r"\bsol_(?:dnnl|rnn)_\w+\s*\(")


def calls_glue(source: str) -> bool:
    """Whether generated ``source`` calls the oneDNN glue (a Conv/Linear/MatMul/RNN library call), i.e. must link it."""
    return _GLUE_CALL.search(source) is not None


class X86Flavour(CpuFlavour):
    """CpuFlavour("x86") plus the oneDNN DNN module when enabled and available.

    ``vector_math``: link libmvec for SIMD math (default: when it is installed; deployed libraries turn it off
    so they need nothing beyond libc/libm/libgomp).
    """

    def __init__(self, dnn: bool | None = None, cc: str | None = None, cflags: str | None = None,
                 vector_math: bool | None = None, blas: bool = True) -> None:
        super().__init__("x86", cc, cflags)
        self.vector_math = has_libmvec() if vector_math is None else vector_math
        wanted = bool(sol.config.get(DNN_KEY.name, True)) if dnn is None else dnn
        self._onednn = onednn_paths() if wanted else None
        #: MKL's libmkl_rt, linked into the models for Linear layers it runs faster (mkl.py); deployed libraries
        #: (``blas=False``) do without it
        self.blas = mkl.library() if blas and self._onednn is not None else None
        if self._onednn is not None:
            lib, include = self._onednn
            tuner = Tuner(self.cc, include, lib, self.glue_toolchain, self.blas)
            self.dnn = OneDnnModule(library_version(lib.resolve()), tuner)
            _build_glue_in_background(self.cc, include, self.glue_toolchain())

    def precision_missing(self, precision: str) -> str | None:
        return precisions.missing(precision, self.dnn is not None)

    def native_precision(self) -> str:
        return "bf16" if precisions.missing("bf16", self.dnn is not None) is None else "fp32"

    def use_precision(self, precision: str) -> None:
        super().use_precision(precision)
        if isinstance(self.dnn, OneDnnModule):
            self.dnn.precision = precision  # the library calls are what computes in it

    @property
    def cflags(self) -> list[str]:
        """The host compiler's flags, plus 512-bit vectors for a build tuned to an AVX-512 host. GCC vectorizes for
        256 bits on such CPUs unless told otherwise, so its `omp simd` loops, and the libmvec math they call, ran
        half as wide as the registers. Preferring 512 (A/B in one process, 2 cores, batch 1): bf16 mobilenet_v2
        1.08x, squeezenet1_1 1.11x, densenet121 1.05x, efficientnet_b0 1.07x, vit_b_16 1.03x, resnet18 1.02-1.08x;
        fp32 mobilenet_v2 1.08x, efficientnet_b0 1.04x, resnet18 1.00x. A width the user's flags set stays."""
        flags = super().cflags
        if ("-march=native" in flags and host_has_avx512()
                and not any(f.startswith("-mprefer-vector-width") for f in flags)):
            flags.append("-mprefer-vector-width=512")
        return flags

    def prelude(self) -> str:
        text = super().prelude()
        if self.vector_math:
            text += vector_math_prelude()
        return text + '#include "sol_dnnl.h"\n' if self.dnn is not None else text

    def compile_command(self, source: Path, library: Path) -> list[str]:
        command = super().compile_command(source, library)
        if self.vector_math:
            command.append("-lmvec")
        if self._onednn is None:
            return command
        lib, include = self._onednn
        headers = [f"-I{glue.HERE}", f"-I{include}"]
        if not calls_glue(source.read_text()):
            # no library call in this model: linking the glue object, oneDNN and MKL would only add 0.2 s to a small
            # model's 0.35 s build (and 0.5 MB to its library). -z defs: a call the check missed fails here, by name
            return [*command, *headers, "-Wl,-z,defs"]
        obj = glue.glue_object(self.cc, include, self.glue_toolchain())
        lib_dir = lib.resolve().parent
        return [*command, *headers, str(obj), f"-L{lib_dir}", f"-l:{lib.name}", f"-Wl,-rpath,{lib_dir}",
                *mkl.link_flags(self.blas)]

    def glue_toolchain(self) -> str:
        """What the glue object depends on besides its sources: the compiler and oneDNN's version, not the
        settings that steer the generated code (a glue build per combination of them cost CI minutes)."""
        return f"{super().toolchain_id()}|onednn {self.dnn.version if self.dnn else ''}"

    def toolchain_id(self) -> str:
        base = super().toolchain_id() + ("|libmvec" if self.vector_math else "")
        if self._onednn is None:
            return base
        return f"{base}|onednn {self.dnn.key() if self.dnn else ''}|glue {glue.source_hash()[:16]}"
