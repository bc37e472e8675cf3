"""Convolutions, matrix products and pooling."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sol.ir import Tensor
from sol.ir.ops import spatial_out

from ..errors import NeedsStaticBatch
from ._registry import handler
from ._util import scalar
from .shape import slice_axis


def _spatial_sizes(x: Tensor) -> list[int]:
    sizes = x.shape[2:]
    if not all(isinstance(s, int) for s in sizes):
        raise NeedsStaticBatch("spatial sizes depend on the batch")
    return [int(s) for s in sizes]


def window_padding(ctx: Any, x: Tensor, kernel: Sequence[int], strides: Sequence[int],
                   dilations: Sequence[int]) -> list[tuple[int, int]]:
    """(begin, end) per spatial dim from ``pads`` / ``auto_pad`` (SAME_UPPER puts the odd pixel at the end)."""
    spatial = len(kernel)
    auto_pad = ctx.sattr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for size, k, s, d in zip(_spatial_sizes(x), kernel, strides, dilations, strict=True):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            out.append((small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small))
        return out
    if auto_pad == "VALID":
        return [(0, 0)] * spatial
    pads = list(ctx.attr("pads", [0] * (2 * spatial)))
    return [(int(pads[i]), int(pads[i + spatial])) for i in range(spatial)]


def _window_attrs(ctx: Any, x: Tensor, kernel: Sequence[int]) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    spatial = len(kernel)
    strides = [int(s) for s in ctx.attr("strides", [1] * spatial)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * spatial)]
    return strides, dilations, window_padding(ctx, x, kernel, strides, dilations)


@handler("Conv")
def conv(ctx: Any) -> Tensor:
    x, w, bias = ctx.need(0), ctx.need(1), ctx.input(2)
    kernel = [int(k) for k in (ctx.attr("kernel_shape") or w.shape[2:])]
    strides, dilations, padding = _window_attrs(ctx, x, kernel)
    attrs = {"stride": tuple(strides), "padding": tuple(padding), "dilation": tuple(dilations),
             "groups": int(ctx.attr("group", 1))}
    return ctx.one("conv", [x, w] + ([bias] if bias is not None else []), attrs)


@handler("ConvTranspose")
def conv_transpose(ctx: Any) -> Tensor:
    x, w, bias = ctx.need(0), ctx.need(1), ctx.input(2)
    kernel = [int(k) for k in (ctx.attr("kernel_shape") or w.shape[2:])]
    spatial = len(kernel)
    strides = [int(s) for s in ctx.attr("strides", [1] * spatial)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * spatial)]
    output_padding = [int(p) for p in ctx.attr("output_padding", [0] * spatial)]
    sizes = _spatial_sizes(x)
    output_shape = ctx.attr("output_shape")
    auto_pad = ctx.sattr("auto_pad", "NOTSET")
    pads: list[tuple[int, int]] = []
    for i in range(spatial):
        full = (sizes[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 + output_padding[i]
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            target = int(output_shape[-spatial + i]) if output_shape is not None else sizes[i] * strides[i]
            total = full - target
            half = total // 2
            pads.append((half, total - half) if auto_pad == "SAME_UPPER" else (total - half, half))
        elif auto_pad == "VALID":
            pads.append((0, 0))
        else:
            given = list(ctx.attr("pads", [0] * (2 * spatial)))
            pads.append((int(given[i]), int(given[i + spatial])))
    # the registry op pads symmetrically; the asymmetric rest is cropped afterwards
    common = [min(b, e) for b, e in pads]
    attrs = {"stride": tuple(strides), "padding": tuple(common), "output_padding": tuple(output_padding),
             "dilation": tuple(dilations), "groups": int(ctx.attr("group", 1))}
    y = ctx.one("conv_transpose", [x, w] + ([bias] if bias is not None else []), attrs)
    for i, ((begin, end), c) in enumerate(zip(pads, common, strict=True)):
        if begin != end:
            axis = 2 + i
            y = slice_axis(ctx, y, axis, begin - c, int(y.shape[axis]) - (end - c), 1)
    return y


@handler("MatMul")
def matmul(ctx: Any) -> Tensor:
    return ctx.one("matmul", [ctx.need(0), ctx.need(1)])


@handler("Gemm")
def gemm(ctx: Any) -> Tensor:
    a, b, c = ctx.need(0), ctx.need(1), ctx.input(2)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if ctx.attr("transA", 0):
        a = ctx.one("permute", [a], {"perm": (1, 0)})
    if ctx.attr("transB", 0):
        if alpha == 1.0 and (c is None or (beta == 1.0 and c.rank == 1 and c.shape[0] == b.shape[0])):
            return ctx.one("linear", [a, b] + ([c] if c is not None else []))  # the fully-connected layer
        b = ctx.one("permute", [b], {"perm": (1, 0)})
    y = ctx.one("matmul", [a, b])
    if alpha != 1.0:
        y = ctx.one("mul", [y, scalar(ctx, alpha, y)])
    if c is not None and beta != 0.0:
        y = ctx.one("add", [y, c if beta == 1.0 else ctx.one("mul", [c, scalar(ctx, beta, c)])])
    return y


def _lowest(dtype: str) -> float | int:
    return -np.inf if dtype.startswith("float") else int(np.iinfo(np.dtype(dtype)).min)


def _same_windows_in_ceil_mode(x: Tensor, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                               padding: Sequence[tuple[int, int]], ceil_mode: bool) -> bool:
    """Whether a max pool padded more at the end than at the start (Caffe's converted models: pads [0, 0, 1, 1]
    for ceil-mode sizes) has the windows of the symmetric begin padding with ceil_mode.

    The windows start at the same positions; the pool clips a window to the input, which for a maximum is the
    same as padding with the lowest value. So the explicit pad, a copy of the whole input, is not needed
    (Inception-v2: 0.1 ms of 9)."""
    sizes = x.shape[2:]
    if not all(isinstance(size, int) for size in sizes):
        return False
    for size, k, s, d, (begin, end) in zip(sizes, kernel, strides, dilations, padding, strict=True):
        explicit = spatial_out(int(size) + begin + end, k, s, 0, d, ceil_mode, 0)  # the padded input's pool
        if end < begin or explicit != spatial_out(int(size), k, s, 2 * begin, d, True, begin):
            return False
    return True


@handler("MaxPool")
def max_pool(ctx: Any) -> Tensor | list[Tensor]:
    x = ctx.need(0)
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides, dilations, padding = _window_attrs(ctx, x, kernel)
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    if ctx.wants_output(1):
        # the Indices output: flat positions in the unpadded input, so the op pads itself
        attrs = {"kernel": tuple(kernel), "stride": tuple(strides), "padding": tuple(padding),
                 "dilation": tuple(dilations), "ceil_mode": ceil_mode, "storage_order": int(ctx.attr("storage_order", 0))}
        return ctx.layer("max_pool_indices", [x], attrs)
    symmetric = [b for b, _ in padding]
    asymmetric = any(b != e for b, e in padding)
    if asymmetric and _same_windows_in_ceil_mode(x, kernel, strides, dilations, padding, ceil_mode):
        ceil_mode = True
    elif asymmetric:
        # asymmetric padding: pad explicitly with the lowest value
        full = tuple([(0, 0), (0, 0)] + list(padding))
        x = ctx.one("pad", [x], {"pads": full, "mode": "constant", "value": _lowest(x.dtype)})
        symmetric = [0] * len(kernel)
    attrs = {"kernel": tuple(kernel), "stride": tuple(strides), "padding": tuple(symmetric),
             "dilation": tuple(dilations), "ceil_mode": ceil_mode}
    return ctx.one("max_pool", [x], attrs)


@handler("AveragePool")
def average_pool(ctx: Any) -> Tensor:
    x = ctx.need(0)
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides, dilations, padding = _window_attrs(ctx, x, kernel)
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    include = bool(ctx.attr("count_include_pad", 0))
    if all(b == e for b, e in padding):
        attrs = {"kernel": tuple(kernel), "stride": tuple(strides), "padding": tuple(b for b, _ in padding),
                 "dilation": tuple(dilations), "ceil_mode": ceil_mode, "count_include_pad": include}
        return ctx.one("avg_pool", [x], attrs)
    if ceil_mode:
        raise ctx.unsupported("asymmetric padding together with ceil_mode")
    # asymmetric: average over the explicitly zero-padded input, rescaled by the share of real pixels per window
    full = tuple([(0, 0), (0, 0)] + list(padding))
    attrs = {"kernel": tuple(kernel), "stride": tuple(strides), "padding": (0,) * len(kernel),
             "dilation": tuple(dilations), "ceil_mode": False, "count_include_pad": True}
    y = ctx.one("avg_pool", [ctx.one("pad", [x], {"pads": full, "mode": "constant", "value": 0.0})], attrs)
    if include:
        return y
    ones = ctx.const(np.ones((1, 1, *_spatial_sizes(x)), dtype=x.dtype))
    share = ctx.one("avg_pool", [ctx.one("pad", [ones], {"pads": full, "mode": "constant", "value": 0.0})], attrs)
    return ctx.one("div", [y, share])


@handler("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: Any) -> Tensor:
    x = ctx.need(0)
    op = "reduce_mean" if ctx.node.op_type == "GlobalAveragePool" else "reduce_max"
    return ctx.one(op, [x], {"axes": tuple(range(2, x.rank)), "keepdims": True})


@handler("LpPool")
def lp_pool(ctx: Any) -> Tensor:
    x = ctx.need(0)
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides, dilations, padding = _window_attrs(ctx, x, kernel)
    p = float(ctx.attr("p", 2))
    full = tuple([(0, 0), (0, 0)] + list(padding))
    powered = ctx.one("pow", [ctx.one("abs", [x]), scalar(ctx, p, x)])
    padded = ctx.one("pad", [powered], {"pads": full, "mode": "constant", "value": 0.0})
    attrs = {"kernel": tuple(kernel), "stride": tuple(strides), "padding": (0,) * len(kernel),
             "dilation": tuple(dilations), "ceil_mode": bool(ctx.attr("ceil_mode", 0)), "count_include_pad": True}
    mean = ctx.one("avg_pool", [padded], attrs)
    total = ctx.one("mul", [mean, scalar(ctx, float(np.prod(kernel)), mean)])
    return ctx.one("pow", [total, scalar(ctx, 1.0 / p, total)])


@handler("LRN")
def lrn(ctx: Any) -> Tensor:
    """x / (bias + alpha / size * (sum of x^2 over ``size`` neighbouring channels)) ** beta."""
    x = ctx.need(0)
    size = int(ctx.attr("size"))
    alpha, beta, bias = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)), float(ctx.attr("bias", 1.0))
    c = x.shape[1]
    rest = list(x.shape[2:])
    squares = ctx.one("mul", [x, x])
    # the channel window as a sum of `size` channel-shifted slices of the zero-padded squares: elementwise along
    # the channels, so the whole normalization fuses into one loop in any layout (a pooling over a [N, 1, C, pixels]
    # view needed the channels moved into a spatial dim and back: copies in channels-last)
    total = squares
    if size > 1:
        before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
        pads = ((0, 0), (before, after), *[(0, 0)] * len(rest))
        padded = ctx.one("pad", [squares], {"pads": pads, "mode": "constant", "value": 0.0})
        slices = [ctx.one("slice", [padded], {"axis": 1, "start": k, "stop": k + c, "step": 1}) for k in range(size)]
        total = slices[0]
        for shifted in slices[1:]:
            total = ctx.one("add", [total, shifted])
    scaled = ctx.one("add", [ctx.one("mul", [total, scalar(ctx, alpha / size, x)]), scalar(ctx, bias, x)])
    return ctx.one("div", [x, ctx.one("pow", [scaled, scalar(ctx, beta, x)])])

