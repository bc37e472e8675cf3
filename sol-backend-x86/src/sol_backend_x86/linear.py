"""Which Linear layers run as a oneDNN 1x1 convolution instead of oneDNN's inner product.

Both compute the same rows x weights^T with the same packed-weights idea, but
their AVX2 kernels differ per shape. Timed on this project's 2-core AVX2
machine (cold caches): at ViT-B/16's 197 rows the convolution's brgconv_1x1
kernels run 1.1-1.5x faster (197x768 -> 3072: 10.7 vs 7.1 ms), at the
encoder's 128 rows they tie, and 128x3072 -> 768 runs 2.4x slower as a
convolution. So the choice is timed per shape at compile time (autotuning;
cached per shape and machine), and without autotuning the inner product
stays. The glue rewrites the call's descriptor (SOL_DNNL_LINEAR_1X1 in
sol_dnnl.h); no operand moves. ``x86::linear_1x1`` turns it off.
"""

from __future__ import annotations

import sol
from sol.ir import Layer
from sol.records import ConfigKey

from .tuning import DIRECT, Tuner, worth_timing

LINEAR_1X1_KEY = ConfigKey("x86::linear_1x1", bool, True,
                           "Run a Linear layer as oneDNN's 1x1 convolution where that is faster than its inner "
                           "product (timed per shape when autotuning is on; ViT-B/16's layers 1.1-1.5x).")

#: SOL_DNNL_LINEAR_1X1 in sol_dnnl.h (DIRECT: the inner product; the convolution must beat it by tuning.MARGIN)
LINEAR_1X1 = 4


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


def choose(layer: Layer, tuner: Tuner | None) -> bool:
    """Whether the Linear ``layer`` runs as a 1x1 convolution: only where timed faster on this machine."""
    if layer.op != "linear" or layer.attrs.get("trained_params") or not sol.config.get(LINEAR_1X1_KEY.name, True):
        return False
    if tuner is None or not sol.config["autotuning"]:
        return False
    shape = shape_of(layer)
    if shape is None or not worth_timing(shape[0] * shape[1] * shape[2]):
        return False
    return tuner.fastest(shape, (DIRECT, LINEAR_1X1), kind="linear") == LINEAR_1X1


def settings() -> str:
    """What decides the choices of ``choose`` besides the layer (for cache keys of generated code)."""
    return f"linear_1x1 {int(sol.config.get(LINEAR_1X1_KEY.name, True))}"
