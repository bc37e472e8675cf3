"""Squeeze-excitation gates folded into the weights of the convolution after them.

EfficientNet, MobileNetV3 and RegNetY scale a feature map per channel by a
gate computed from that same map (``x * s``, s of shape [N, C, 1, 1]) and feed
the product straight into a 1x1 convolution. Writing ``x * s`` costs a pass
over the whole map: efficientnet_b0's 16 such multiplies took 0.46 ms of its
4.7 ms in ``sol.profile`` (0.05-0.09 ms each at 28x28 to 112x112). Since
``conv(x * s, w) = conv(x, w * s)`` (zero padding included), the oneDNN call
instead reads x and multiplies its packed weights by s, a gather over K x C
floats, on every call (the glue's ``src_scale``, sol_dnnl.h). That pays where
the weights are much smaller than the map: early, high-resolution layers.
Paired rounds (``benchmarks/ab.py --key x86::fold_input_scale``, 30 rounds, on
a noisy phase of the AVX-512 VM): efficientnet_b0 1.055x (IQR 1.035-1.081)
with 5 of its 16 gates folded; mobilenet_v3_small and regnet_y_400mf, whose
gates are mostly at 14x14 and below, 0.99-1.00x (folding them all did not pay
there either, hence MAX_WEIGHTS_FRACTION). ``x86::fold_input_scale`` turns it
off.
"""

from __future__ import annotations

import math

import sol
from sol.ir import Layer
from sol.records import ConfigKey

FOLD_INPUT_SCALE_KEY = ConfigKey("x86::fold_input_scale", bool, True,
                                 "Fold a per-channel multiply before a convolution (squeeze-excitation's gate) into "
                                 "that convolution's weights on every call instead of writing the scaled tensor, "
                                 "where the weights are much smaller than the tensor.")

#: fold where the weights are at most this fraction of the scaled tensor (each call then scales K x C x taps
#: weights, a scalar gather, instead of writing N x C x H x W values with SIMD stores). At 1/4,
#: mobilenet_v3_small's gates at 14x14 were folded too, for no gain (0.993x, IQR 0.963-1.014).
MAX_WEIGHTS_FRACTION = 0.125


def foldable(mul: Layer, layer: Layer) -> bool:
    """``mul`` = x * s with s of shape [1, C, 1, ...] feeding ``layer``, a convolution with static weights and no
    groups at batch 1, whose weights are at most MAX_WEIGHTS_FRACTION of x."""
    from sol.codegen.dnn import scale_operands

    if not sol.config.get(FOLD_INPUT_SCALE_KEY.name, True):
        return False
    if layer.op != "conv" or int(layer.attrs.get("groups", 1)) != 1 or layer.attrs.get("trained_params"):
        return False
    if any(t.dtype != "float32" for t in (*mul.inputs, *mul.outputs)):
        return False
    x, s = scale_operands(mul)
    w = layer.inputs[1]
    if x.rank < 3 or x.shape != mul.outputs[0].shape or not all(isinstance(d, int) for d in (*x.shape, *w.shape)):
        return False
    if x.shape[0] != 1 or tuple(s.shape) != (1, x.shape[1], *([1] * (x.rank - 2))):
        return False
    return math.prod(w.shape) <= MAX_WEIGHTS_FRACTION * math.prod(x.shape)


def settings() -> str:
    """What decides ``foldable`` besides the layers (for cache keys of generated code)."""
    return f"fold_input_scale {int(sol.config.get(FOLD_INPUT_SCALE_KEY.name, True))} {MAX_WEIGHTS_FRACTION}"
