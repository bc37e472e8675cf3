"""Which grouped and depthwise convolutions run as SOL's direct kernel (glue/sol_grouped.cpp) instead of oneDNN.

oneDNN 3.2 on AVX2 runs grouped convolutions with few channels per group as
im2col plus a GEMM per group: ResNeXt-50's first-stage 3x3 convolution (32
groups of 4 channels, 56x56) takes 5-8 ms there, 0.6-0.9 ms in SOL's kernel.
oneDNN's fp32 depthwise kernels, on the other hand, are good: SOL's beats them only
on some shapes (7x7 depthwise, groups of 6 to 16 channels), so the choice is
measured per layer, like Winograd's (winograd.py): with ``sol.config["autotuning"]``
both are timed at compile time on the layer's shape and the faster is kept
(cached per shape and machine); without, a heuristic from those measurements
decides. ``x86::grouped`` turns the kernel off.

In bf16 (bf16-stored activations) a depthwise convolution has its own kernel
(glue/sol_depthwise.h: AVX-512, fp32 arithmetic on bf16 data), because
oneDNN 3.2's bf16 depthwise kernel (jit_dw) is the slow one there: 3x3 over
56x56x144, 120 us against 71 (two cores; OpenVINO's fork of oneDNN takes 89).
It is timed against oneDNN in bf16 the same way, and chosen without timing.

Measured on this project's AVX2 machine (2 cores, cold caches, oneDNN vs SOL):
g32 at 56x56 with 4 channels per group 7.5 vs 0.9 ms; 8 per group (28x28)
0.79 vs 0.74 ms; 32 per group (7x7) 0.49 vs 0.99 ms; depthwise 3x3 at 56x56
0.37 vs 0.61 ms; depthwise 7x7 at 56x56 1.09 vs 0.80 ms.
"""

from __future__ import annotations

import sol
from sol.ir import Layer
from sol.records import ConfigKey

from . import cpuinfo, tuning
from .tuning import DIRECT, Tuner, post_ops_supported

GROUPED_KEY = ConfigKey("x86::grouped", bool, True,
                        "Run grouped and depthwise convolutions as SOL's direct kernel where it is faster than "
                        "oneDNN (timed at compile time when autotuning is on; ResNeXt's groups of 4 channels run "
                        "8x faster than oneDNN's im2col+GEMM on AVX2).")

#: SOL_DNNL_GROUPED in sol_dnnl.h (the kernel must beat oneDNN by tuning.MARGIN to be chosen)
GROUPED = 3


def shape_of(layer: Layer) -> tuple[int, ...] | None:
    """The glue's convolution shape (sol_dnnl_time_conv) of a 2-D grouped conv, or None when it has none."""
    from sol.codegen.kernels.base import spatial_padding  # lazy: the kernels load every op

    x, w, a = layer.inputs[0], layer.inputs[1], layer.attrs
    if layer.op != "conv" or x.rank != 4 or not all(isinstance(s, int) for s in (*x.shape[1:], *w.shape)):
        return None
    (top, bottom), (left, right) = spatial_padding(a["padding"], 2)
    batch = x.shape[0] if isinstance(x.shape[0], int) else 1
    sh, sw = (int(s) for s in a["stride"])
    return (batch, int(x.shape[2]), int(x.shape[3]), int(x.shape[1]), int(w.shape[0]), int(a.get("groups", 1)),
            int(w.shape[2]), int(w.shape[3]), sh, sw, top, left, bottom, right)


def handles(shape: tuple[int, ...]) -> bool:
    """The grouping the kernel computes (Conv::handles in sol_grouped.cpp): output channels a multiple of 8, and
    groups of 8k output channels or of 1 or 4 output channels with as many input channels."""
    c, k, groups = shape[3], shape[4], shape[5]
    if groups < 2 or c % groups or k % groups or k % 8:
        return False
    cg, kg = c // groups, k // groups
    return kg % 8 == 0 or (kg in (1, 4) and cg == kg)


def eligible(layer: Layer, post_ops: list[Layer]) -> bool:
    """Whether the kernel can compute this conv and its fused post-ops."""
    if layer.attrs.get("trained_params") or any(int(d) != 1 for d in layer.attrs.get("dilation", (1, 1))):
        return False  # trained weights would be re-packed every step
    shape = shape_of(layer)
    return shape is not None and handles(shape) and post_ops_supported(post_ops)


def choose(layer: Layer, post_ops: list[Layer], tuner: Tuner | None, precision: str = "fp32") -> bool:
    """Whether ``layer`` runs as SOL's grouped kernel: timed on this machine (autotuning) or by the heuristic.

    In bf16 a depthwise convolution runs as SOL's bf16 depthwise kernel (see depthwise) or in oneDNN, both reading
    and writing the bf16 activations around it (SOL's fp32 grouped kernel would need them in fp32: a conversion
    before and after). Groups of several channels keep the fp32 choice: oneDNN's im2col+GEMM stays slow in bf16.
    """
    if not sol.config.get(GROUPED_KEY.name, True):
        return False
    if precision != "fp32" and depthwise(layer):
        if not bf16_eligible(layer, post_ops):
            return False
        shape = shape_of(layer)
        assert shape is not None
        if tuner is not None and sol.config["autotuning"] and worth_timing(shape):
            return tuner.fastest(shape, (DIRECT, GROUPED), kind="conv bf16") == GROUPED
        return True  # faster than oneDNN 3.2's jit_dw on every depthwise layer of MobileNetV2 and EfficientNet-B0
    if not eligible(layer, post_ops):
        return False
    shape = shape_of(layer)
    assert shape is not None  # eligible
    if tuner is not None and sol.config["autotuning"] and worth_timing(shape):
        return tuner.fastest(shape, (DIRECT, GROUPED)) == GROUPED
    return heuristic(shape)


#: fused activations the bf16 depthwise kernel computes (sol_kernels::eltwise16); it takes no binary post-ops
_BF16_ACTIVATIONS = frozenset({"relu", "leaky_relu", "clamp", "silu", "sigmoid", "hardswish", "hardsigmoid", "gelu"})
#: CPU flags the bf16 depthwise kernel needs (sol_depthwise.cpp's own check agrees: the call falls back otherwise)
BF16_KERNEL_FLAGS = ("avx512f", "avx512bw", "avx512_bf16")


def depthwise(layer: Layer) -> bool:
    """A 2-D convolution with one input and one output channel per group: in a bf16 model, the grouped choice of
    such a layer is the bf16 depthwise kernel (bf16 in and out), of any other the fp32 grouped kernel."""
    shape = shape_of(layer)
    return shape is not None and shape[3] == shape[4] == shape[5] > 1


def bf16_eligible(layer: Layer, post_ops: list[Layer]) -> bool:
    """Whether the bf16 depthwise kernel can compute this depthwise conv and its fused post-ops on this CPU."""
    if layer.attrs.get("trained_params") or any(int(d) != 1 for d in layer.attrs.get("dilation", (1, 1))):
        return False
    if not all(p.op in _BF16_ACTIVATIONS and len(p.inputs) == 1 for p in post_ops):
        return False
    flags = cpuinfo.host_flags()
    return all(f in flags for f in BF16_KERNEL_FLAGS)


def worth_timing(shape: tuple[int, ...]) -> bool:
    """Enough multiply-adds for a timing (tuning.worth_timing)."""
    n, h, w, c, k, groups, kh, kw, sh, sw, top, left, bottom, right = shape
    outputs = n * ((h + top + bottom - kh) // sh + 1) * ((w + left + right - kw) // sw + 1) * k
    return tuning.worth_timing(outputs * (c // groups) * kh * kw)


def heuristic(shape: tuple[int, ...]) -> bool:
    """From the measurements above: groups of 2-8 channels (oneDNN's im2col+GEMM) and 7x7 depthwise kernels."""
    c, groups, kh = shape[3], shape[5], shape[6]
    per_group = c // groups
    return 2 <= per_group <= 8 or (per_group == 1 and kh >= 7)


def settings() -> str:
    """What decides the choices of ``choose`` besides the layer (for cache keys of generated code)."""
    return f"grouped {int(sol.config.get(GROUPED_KEY.name, True))}"
