"""Compile-time timing of oneDNN against SOL's own kernels, through the glue (a shared library built once).

Winograd (winograd.py), the grouped kernel (grouped.py) and Linear as a 1x1
convolution (linear.py) each time their candidates on the layer's shape with
`Tuner.fastest`; the glue runs them in interleaved rounds, each call with its
input warm and everything else evicted (as inside a model), compares each with
oneDNN round by round, and the timings are cached per shape, machine and glue
source. An alternative to oneDNN must beat it by MARGIN. Their epilogue
(glue/sol_kernels.h) is shared, and so is the test of which fused post-ops it
computes.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path

from sol import cache, log
from sol.ir import Layer

from . import glue, mkl

_log = log.get("x86")

#: SOL_DNNL_DIRECT in sol_dnnl.h: oneDNN's own choice (for a Linear: its inner product)
DIRECT = 0
#: an alternative must beat oneDNN by this factor in the timing to be chosen (ties go to oneDNN)
MARGIN = 0.95
RUNS = 7
#: fewer multiply-adds than this (2 MFLOP) are not timed: such layers take microseconds with any kernel, and
#: each timing costs ~0.2 s of compile
MIN_TIMED_MULTIPLY_ADDS = 1 << 20
#: how a Winograd call splits its work between the threads (SOL_DNNL_WINOGRAD_BLOCKS / _PHASES in sol_dnnl.h),
#: ORed onto its tile size; without either the glue picks by the size of the transformed weights
WINOGRAD_BLOCKS, WINOGRAD_PHASES, WINOGRAD_SCHEDULE_MASK = 0x100, 0x200, 0xF00
WINOGRAD_SCHEDULES = {WINOGRAD_BLOCKS: "per-thread blocks", WINOGRAD_PHASES: "shared phases"}
_CONV_NAMES = {DIRECT: "oneDNN", 1: "Winograd F(4x4,3x3)", 2: "Winograd F(2x2,3x3)", 3: "SOL grouped"}
#: the glue's algorithms by kind of timing, for the log (sol_dnnl.h)
NAMES = {
    "conv": {**_CONV_NAMES, **{tiles | schedule: f"{_CONV_NAMES[tiles]} {how}" for tiles in (1, 2)
                               for schedule, how in WINOGRAD_SCHEDULES.items()}},
    "linear": {DIRECT: "oneDNN inner product", 4: "oneDNN 1x1 convolution", 5: "MKL packed GEMM",
               6: "oneDNN matmul"},
}
NAMES["linear bf16"] = NAMES["linear"]
NAMES["conv bf16"] = {DIRECT: "oneDNN", 3: "SOL bf16 depthwise"}
#: the glue's operand type of each kind of timing (sol_dnnl.h: SOL_DNNL_F32, SOL_DNNL_BF16)
_PRECISION = {"conv": 0, "conv bf16": 1, "linear": 0, "linear bf16": 1}
#: eltwise post-ops the epilogue of SOL's kernels computes (post_ops_for in sol_dnnl.cpp); binary ops all work
_ACTIVATIONS = frozenset({"relu", "leaky_relu", "clamp"})


def worth_timing(multiply_adds: int) -> bool:
    """Whether a layer of this many multiply-adds is worth a timing (see MIN_TIMED_MULTIPLY_ADDS)."""
    return multiply_adds >= MIN_TIMED_MULTIPLY_ADDS


def post_ops_supported(post_ops: list[Layer]) -> bool:
    """Whether the epilogue of SOL's own kernels (glue/sol_kernels.h) computes these fused post-ops."""
    return all(p.op in _ACTIVATIONS or len(p.inputs) == 2 for p in post_ops)


class Tuner:
    """Times oneDNN against SOL's kernels on one shape at a time (see the module docstring)."""

    def __init__(self, cc: str, include_dir: Path, library: Path, toolchain: Callable[[], str],
                 blas: Path | None = None) -> None:
        # toolchain: the flavour's glue_toolchain, so the tuner links the same glue object as the models
        self.cc, self.include_dir, self.library, self.toolchain = cc, include_dir, library, toolchain
        #: MKL's libmkl_rt where the models link it (mkl.py): LINEAR_BLAS is then a candidate of linear.choose
        self.blas = blas

    def fastest(self, shape: tuple[int, ...], algorithms: tuple[int, ...], allowed: Iterable[int] | None = None,
                kind: str = "conv") -> int:
        """The fastest of ``allowed`` (default: all of ``algorithms``) that beats DIRECT by MARGIN, else DIRECT.

        All of ``algorithms`` are timed (once per shape: cached), so changing ``allowed`` needs no new timing.
        """
        timings = self.timings(shape, algorithms, kind=kind)
        permitted = set(algorithms if allowed is None else allowed)
        direct = timings[DIRECT]
        faster = [(t, a) for a, t in timings.items() if a != DIRECT and a in permitted and 0 < t < MARGIN * direct]
        return min(faster)[1] if faster else DIRECT

    def timings(self, shape: tuple[int, ...], algorithms: tuple[int, ...], kind: str = "conv") -> dict[int, float]:
        """Seconds per algorithm (negative: it cannot run the shape); cached per shape. ``kind`` "conv": a glue
        convolution shape (sol_dnnl_time_conv); "linear": (rows, in, out) of an inner product (sol_dnnl_time_linear);
        "linear bf16", "conv bf16": the same computed in bf16, its activations stored as bf16 (a bf16 model's calls)."""
        key = hashlib.sha256(f"{kind} timings|{glue.source_hash()}|{self.cc}|{self.library}|{shape}|{algorithms}"
                             .encode()).hexdigest()

        def measure(directory: Path) -> dict[str, object]:
            timings = {str(a): seconds for a, seconds in self._time_all(shape, algorithms, kind).items()}
            (directory / "timings.json").write_text(json.dumps(timings))
            names = NAMES[kind]
            _log.debug("x86 autotuning: %s %s: %s", kind, shape, ", ".join(
                f"{names.get(int(a), a)} {t * 1e3:.3f} ms" for a, t in timings.items()))
            return {"what": f"x86 autotuning: {kind}", "shape": list(shape), "seconds": timings}

        return {int(a): float(t) for a, t in cache.get_or_build(key, measure).metadata["seconds"].items()}

    def _time_all(self, shape: tuple[int, ...], algorithms: tuple[int, ...], kind: str = "conv") -> dict[int, float]:
        """Seconds per algorithm (negative: it cannot run the shape), timed in interleaved rounds."""
        seconds = (ctypes.c_double * len(algorithms))()
        chosen = (ctypes.c_int32 * len(algorithms))(*algorithms)
        if kind.startswith("linear"):
            self._functions().sol_dnnl_time_linear(chosen, len(algorithms), *shape, _PRECISION[kind], RUNS, seconds)
        else:
            self._functions().sol_dnnl_time_conv(chosen, len(algorithms), (ctypes.c_int64 * len(shape))(*shape),
                                                 _PRECISION[kind], RUNS, seconds)
        return dict(zip(algorithms, map(float, seconds), strict=True))

    @functools.cache  # noqa: B019 - one tuner per flavour, living as long as the process
    def _functions(self) -> ctypes.CDLL:
        obj = glue.glue_object(self.cc, self.include_dir, self.toolchain())
        key = hashlib.sha256(f"glue tuning library|{obj}|{self.library}|{mkl.link_flags(self.blas)}".encode()).hexdigest()

        def build(directory: Path) -> dict[str, str]:
            lib_dir = self.library.resolve().parent
            glue.run_all([[*shlex.split(self.cc), "-shared", "-fopenmp", str(obj), "-o", str(directory / "tuning.so"),
                           f"-L{lib_dir}", f"-l:{self.library.name}", f"-Wl,-rpath,{lib_dir}",
                           *mkl.link_flags(self.blas)]])
            return {"what": "oneDNN glue for autotuning"}

        lib = ctypes.CDLL(str(cache.get_or_build(key, build).file("tuning.so")))
        lib.sol_dnnl_time_conv.restype = None
        lib.sol_dnnl_time_conv.argtypes = [ctypes.POINTER(ctypes.c_int32), ctypes.c_int32,
                                           ctypes.POINTER(ctypes.c_int64), ctypes.c_int32, ctypes.c_int32,
                                           ctypes.POINTER(ctypes.c_double)]
        lib.sol_dnnl_time_linear.restype = None
        lib.sol_dnnl_time_linear.argtypes = [ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, *[ctypes.c_int64] * 3,
                                             ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_double)]
        return lib
