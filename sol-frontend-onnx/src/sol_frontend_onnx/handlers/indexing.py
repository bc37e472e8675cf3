"""Gathers and one-hot encodings."""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.ir import Tensor

from ._registry import handler
from ._util import cast, norm_axis, reshape, unsqueeze


@handler("Gather")
def gather(ctx: Any) -> Tensor:
    x = ctx.need(0)
    return ctx.one("gather", [x, ctx.need(1)], {"axis": norm_axis(int(ctx.attr("axis", 0)), x.rank)})


@handler("GatherElements")
def gather_elements(ctx: Any) -> Tensor:
    x = ctx.need(0)
    return ctx.one("gather_elements", [x, ctx.need(1)], {"axis": norm_axis(int(ctx.attr("axis", 0)), x.rank)})


@handler("OneHot")
def one_hot(ctx: Any) -> Tensor:
    indices, depth_t, values = ctx.need(0), ctx.need(1), ctx.need(2)
    depth = int(np.asarray(ctx.static(depth_t, "depth")).reshape(-1)[0])
    rank = indices.rank + 1
    axis = norm_axis(int(ctx.attr("axis", -1)), rank)
    index = cast(ctx, indices, "int64")
    # negative indices count from the end of the depth
    negative = ctx.one("lt", [index, ctx.const(np.asarray(0, dtype=np.int64))])
    index = ctx.one("where", [negative, ctx.one("add", [index, ctx.const(np.asarray(depth, dtype=np.int64))]), index])
    positions = np.arange(depth, dtype=np.int64).reshape([depth if d == axis else 1 for d in range(rank)])
    hot = ctx.one("eq", [unsqueeze(ctx, index, [axis]), ctx.const(positions)])
    off = ctx.one("gather", [values, ctx.const(np.asarray(0, dtype=np.int64))], {"axis": 0})
    on = ctx.one("gather", [values, ctx.const(np.asarray(1, dtype=np.int64))], {"axis": 0})
    return ctx.one("where", [hot, on, off])


def _scatter_reduction(ctx: Any) -> str:
    reduction = ctx.sattr("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ctx.unsupported(f"reduction {reduction!r}")
    return reduction


@handler("ScatterElements", "Scatter")
def scatter_elements(ctx: Any) -> Tensor:
    data, indices, updates = ctx.need(0), ctx.need(1), ctx.need(2)
    attrs = {"axis": norm_axis(int(ctx.attr("axis", 0)), data.rank), "reduction": _scatter_reduction(ctx)}
    return ctx.one("scatter_elements", [data, indices, updates], attrs)


@handler("ScatterND")
def scatter_nd(ctx: Any) -> Tensor:
    data, indices, updates = ctx.need(0), ctx.need(1), ctx.need(2)
    return ctx.one("scatter_nd", [data, indices, updates], {"reduction": _scatter_reduction(ctx)})


@handler("GatherND")
def gather_nd(ctx: Any) -> Tensor:
    return ctx.one("gather_nd", [ctx.need(0), ctx.need(1)], {"batch_dims": int(ctx.attr("batch_dims", 0))})


@handler("TopK")
def top_k(ctx: Any) -> list[Tensor]:
    """k is an input from opset 10 on: its value fixes the output shape, so it must be known when optimizing."""
    x = ctx.need(0)
    k = int(ctx.attr("k")) if ctx.opset < 10 else ctx.ints(ctx.need(1), "k")[0]
    # sorted=0 allows any order; sorted is one of them
    attrs = {"axis": norm_axis(int(ctx.attr("axis", -1)), x.rank), "k": k, "largest": bool(ctx.attr("largest", 1))}
    return ctx.layer("topk", [x], attrs)


@handler("CumProd")
def cumprod(ctx: Any) -> Tensor:
    x = ctx.need(0)
    axis = int(np.asarray(ctx.static(ctx.need(1), "axis")).reshape(-1)[0])
    attrs = {"axis": norm_axis(axis, x.rank), "exclusive": bool(ctx.attr("exclusive", 0)),
             "reverse": bool(ctx.attr("reverse", 0))}
    return ctx.one("cumprod", [x], attrs)


@handler("MaxUnpool")
def max_unpool(ctx: Any) -> Tensor:
    """Zeros with X written at MaxPool's flat Indices: one scatter_elements over the flattened output."""
    x, indices = ctx.need(0), ctx.need(1)
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    spatial = len(kernel)
    strides = [int(s) for s in ctx.attr("strides", [1] * spatial)]
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * spatial))]
    sizes = [int(s) for s in x.shape[2:]]
    # the indices address the inferred shape; a given output_shape only pads it at the end (ONNX's reference)
    inferred = [int(x.shape[0]), int(x.shape[1])] + [(sizes[i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + spatial]
                                                    for i in range(spatial)]
    shape_t = ctx.input(2)
    shape = ctx.ints(shape_t, "output_shape") if shape_t is not None else inferred
    if any(s < i for s, i in zip(shape, inferred, strict=True)):
        raise ctx.unsupported(f"output_shape {shape} smaller than the unpooled shape {inferred}")
    zeros = ctx.const(np.zeros((int(np.prod(inferred)),), dtype=x.dtype), name="unpooled")
    flat_x = reshape(ctx, x, (int(np.prod([int(s) for s in x.shape])),))
    flat_i = reshape(ctx, indices, flat_x.shape)
    out = ctx.one("scatter_elements", [zeros, flat_i, flat_x], {"axis": 0, "reduction": "none"})
    out = reshape(ctx, out, tuple(inferred))
    if shape != inferred:
        out = ctx.one("pad", [out], {"pads": tuple((0, s - i) for s, i in zip(shape, inferred, strict=True)),
                                     "mode": "constant", "value": 0.0})
    return out
