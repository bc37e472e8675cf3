"""Which kernel runs a Linear layer: oneDNN's inner product, oneDNN's 1x1 convolution, or MKL's packed GEMM.

Both compute the same rows x weights^T with the same packed-weights idea, but
their AVX2 kernels differ per shape. Timed on this project's 2-core AVX2
machine (cold caches): at ViT-B/16's 197 rows the convolution's brgconv_1x1
kernels run 1.1-1.5x faster (197x768 -> 3072: 10.7 vs 7.1 ms), at the
encoder's 128 rows they tie, and 128x3072 -> 768 runs 2.4x slower as a
convolution. So the choice is timed per shape at compile time (autotuning;
cached per shape and machine), and without autotuning the inner product
stays. The glue rewrites the call's descriptor (SOL_DNNL_LINEAR_1X1 in
sol_dnnl.h); no operand moves. ``x86::linear_1x1`` turns it off.

Where Intel MKL is installed (mkl.py), its packed GEMM is a third candidate (SOL_DNNL_LINEAR_BLAS,
glue/sol_blas.h): on this project's AVX-512 machine it ran BERT-base's layers (128 rows, 768 <-> 3072) at
332-350 GFLOP/s on two cores against 279-295 for the inner product and 288-314 for the convolution (one
interleaved timing). Its bias and post-ops (`blas_computes`) follow row by row in the glue.

A model computing in bf16 runs its Linear layers as oneDNN's matmul (SOL_DNNL_LINEAR_MATMUL; its AMX blocking
differs from the inner product's), untimed. Inside ViT-B/16 on the AMX machine it was the fastest of the three on
every shape (medians of 120 calls per shape, oneDNN's own timer: 197 x 768 -> 2304 0.47 ms against 0.61 for the
inner product, 3072 -> 768 0.78 against 0.92-0.95, 768 -> 3072 0.72 against 0.92 and 0.74 for the 1x1
convolution, 768 -> 768 0.19 against 0.24-0.27), and the whole model ran 36.0 ms against 45.0 with the inner
product everywhere (docs/x86.md). Timed alone (cold caches, as the fp32 choice is), the same shapes ran 1.5-2x
slower than inside the model and their ranking changed from one timing to the next: the inner product of 197 x
768 -> 3072 took 0.56 ms in one timing and 1.43 in the next, so a timing picked it for some layers and cost the
model up to a quarter of its time. ``x86::linear_matmul`` off leaves bf16 Linears to that timing (inner product
against the 1x1 convolution, in bf16).
"""

from __future__ import annotations

from collections.abc import Sequence

import sol
from sol.ir import Layer
from sol.records import ConfigKey

from .cpuinfo import host_has_avx512
from .tuning import DIRECT, Tuner, worth_timing

LINEAR_1X1_KEY = ConfigKey("x86::linear_1x1", bool, True,
                           "Run a Linear layer as oneDNN's 1x1 convolution where that is faster than its inner "
                           "product (timed per shape when autotuning is on; ViT-B/16's layers 1.1-1.5x).")

LINEAR_MATMUL_KEY = ConfigKey("x86::linear_matmul", bool, True,
                              "In bf16, run Linear layers as oneDNN's matmul (its AMX blocking differs from the inner "
                              "product's; ViT-B/16 36.0 against 45.0 ms); off: time the inner product against the 1x1 "
                              "convolution.")

#: SOL_DNNL_LINEAR_1X1, SOL_DNNL_LINEAR_BLAS and SOL_DNNL_LINEAR_MATMUL in sol_dnnl.h (DIRECT: the inner product; an
#: alternative must beat it by tuning.MARGIN)
LINEAR_1X1, LINEAR_BLAS, LINEAR_MATMUL = 4, 5, 6
GLUE_NAMES = {LINEAR_1X1: "SOL_DNNL_LINEAR_1X1", LINEAR_BLAS: "SOL_DNNL_LINEAR_BLAS",
              LINEAR_MATMUL: "SOL_DNNL_LINEAR_MATMUL"}


def shape_of(layer: Layer) -> tuple[int, int, int] | None:
    """(rows, in, out) of a Linear at batch 1, or None when a dimension is not static."""
    x, w = layer.inputs[0], layer.inputs[1]
    rows = 1
    for i, size in enumerate(x.shape[:-1]):
        if isinstance(size, int):
            rows *= size
        elif i != 0:  # the wildcard batch counts as 1 (the creation batch); other symbols have no timing shape
            return None
    sizes = (x.shape[-1], w.shape[0])
    if not all(isinstance(s, int) for s in sizes):
        return None
    return rows, int(sizes[0]), int(sizes[1])


#: eltwise post-ops the MKL Linear's epilogue computes (sol_blas.cpp); binary post-ops all work
_BLAS_ACTIVATIONS = frozenset({"relu", "leaky_relu", "clamp", "gelu"})


def blas_computes(post_ops: Sequence[Layer]) -> bool:
    """Whether the MKL Linear's epilogue computes these fused post-ops (otherwise the call stays with oneDNN). GELU
    only on CPUs with AVX-512F, where the epilogue computes it in registers: elsewhere it calls erf/tanh one value
    at a time, a cost the timing (which has no post-ops) would not see."""
    return all((p.op in _BLAS_ACTIVATIONS and (p.op != "gelu" or host_has_avx512())) or len(p.inputs) == 2
               for p in post_ops)


def choose(layer: Layer, post_ops: Sequence[Layer], tuner: Tuner | None, reduced: bool = False) -> int:
    """How the Linear ``layer`` with its fused ``post_ops`` runs: DIRECT (oneDNN's inner product), LINEAR_1X1 or
    LINEAR_BLAS, the last two only where timed faster on this machine. Trained weights stay with the inner
    product. A call that computes in bf16 (``reduced``) runs as oneDNN's matmul (LINEAR_MATMUL, see the module
    docstring); with ``x86::linear_matmul`` off it is timed in bf16, where MKL's fp32 GEMM is no candidate."""
    if layer.op != "linear" or layer.attrs.get("trained_params") or tuner is None:
        return DIRECT
    if reduced and sol.config.get(LINEAR_MATMUL_KEY.name, True):
        return LINEAR_MATMUL
    if not sol.config["autotuning"]:
        return DIRECT
    allowed = [LINEAR_1X1] if sol.config.get(LINEAR_1X1_KEY.name, True) else []
    if tuner.blas is not None and not reduced and blas_computes(post_ops):
        allowed.append(LINEAR_BLAS)
    shape = shape_of(layer)
    if not allowed or shape is None or not worth_timing(shape[0] * shape[1] * shape[2]):
        return DIRECT
    if reduced:  # timed as it runs, in bf16 (oneDNN's AMX kernels rank otherwise than its fp32 ones)
        return tuner.fastest(shape, (DIRECT, LINEAR_1X1), allowed, kind="linear bf16")
    candidates = (DIRECT, LINEAR_1X1, LINEAR_BLAS) if tuner.blas is not None else (DIRECT, LINEAR_1X1)
    return tuner.fastest(shape, candidates, allowed, kind="linear")


def settings(tuner: Tuner | None) -> str:
    """What decides the choices of ``choose`` besides the layer (for cache keys of generated code)."""
    return (f"linear_1x1 {int(sol.config.get(LINEAR_1X1_KEY.name, True))}"
            f"|linear_matmul {int(sol.config.get(LINEAR_MATMUL_KEY.name, True))}"
            f"|mkl {tuner.blas if tuner is not None else None}")
