"""Reductions, arg-reductions, the softmax family and cumulative sums."""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.ir import Tensor

from ._registry import handler
from ._util import flatten_2d, norm_axis, reshape, scalar

#: op type -> the opset from which its axes are an input instead of an attribute
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _axes(ctx: Any, x: Tensor) -> list[int] | None:
    """The reduced axes; None means "no reduction" (noop_with_empty_axes with empty axes)."""
    since = _AXES_INPUT_SINCE.get(ctx.node.op_type, 18)
    axes = ctx.ints(ctx.input(1), "axes") if ctx.opset >= since else ctx.attr("axes")
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return list(range(x.rank))
    return sorted({norm_axis(int(a), x.rank) for a in axes})


def _reduce(ctx: Any, op: str, x: Tensor, axes: list[int], keepdims: bool) -> Tensor:
    return ctx.one(op, [x], {"axes": tuple(axes), "keepdims": keepdims})


@handler("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
         "ReduceLogSumExp", "ReduceSumSquare")
def reduction(ctx: Any) -> Tensor:
    x = ctx.need(0)
    axes = _axes(ctx, x)
    kind = ctx.node.op_type
    if axes is None:
        return ctx.one("identity", [x])
    keep = bool(ctx.attr("keepdims", 1))
    simple = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
              "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod"}
    if kind in simple:
        return _reduce(ctx, simple[kind], x, axes, keep)
    if kind == "ReduceL1":
        return _reduce(ctx, "reduce_sum", ctx.one("abs", [x]), axes, keep)
    if kind == "ReduceSumSquare":
        return _reduce(ctx, "reduce_sum", ctx.one("mul", [x, x]), axes, keep)
    if kind == "ReduceL2":
        return ctx.one("sqrt", [_reduce(ctx, "reduce_sum", ctx.one("mul", [x, x]), axes, keep)])
    if kind == "ReduceLogSum":
        return ctx.one("log", [_reduce(ctx, "reduce_sum", x, axes, keep)])
    # ReduceLogSumExp, shifted by the maximum so exp cannot overflow
    peak = _reduce(ctx, "reduce_max", x, axes, True)
    total = _reduce(ctx, "reduce_sum", ctx.one("exp", [ctx.one("sub", [x, peak])]), axes, keep)
    shift = peak if keep else _reduce(ctx, "reduce_max", x, axes, False)
    return ctx.one("add", [ctx.one("log", [total]), shift])


@handler("ArgMax", "ArgMin")
def arg_extremum(ctx: Any) -> Tensor:
    x = ctx.need(0)
    attrs = {"axis": norm_axis(int(ctx.attr("axis", 0)), x.rank), "keepdims": bool(ctx.attr("keepdims", 1)),
             "select_last_index": bool(ctx.attr("select_last_index", 0))}
    return ctx.one(ctx.node.op_type.lower(), [x], attrs)


def _softmax_like(ctx: Any, op: str) -> Tensor:
    x = ctx.need(0)
    if ctx.opset >= 13:
        return ctx.one(op, [x], {"axis": norm_axis(int(ctx.attr("axis", -1)), x.rank)})
    # before opset 13 the input is coerced to 2-D at the axis and normalised over the second dim
    flat = flatten_2d(ctx, x, int(ctx.attr("axis", 1)))
    return reshape(ctx, ctx.one(op, [flat], {"axis": 1}), x.shape)


@handler("Softmax")
def softmax(ctx: Any) -> Tensor:
    return _softmax_like(ctx, "softmax")


@handler("LogSoftmax")
def log_softmax(ctx: Any) -> Tensor:
    return _softmax_like(ctx, "log_softmax")


@handler("Hardmax")
def hardmax(ctx: Any) -> Tensor:
    x = ctx.need(0)
    if ctx.opset >= 13:
        target, axis = x, norm_axis(int(ctx.attr("axis", -1)), x.rank)
    else:
        target, axis = flatten_2d(ctx, x, int(ctx.attr("axis", 1))), 1
    winner = ctx.one("argmax", [target], {"axis": axis, "keepdims": True})
    extent = int(target.shape[axis])
    positions = np.arange(extent, dtype=np.int64).reshape([extent if d == axis else 1 for d in range(target.rank)])
    hot = ctx.one("cast", [ctx.one("eq", [winner, ctx.const(positions)])], {"dtype": x.dtype})
    return reshape(ctx, hot, x.shape)


@handler("CumSum")
def cumsum(ctx: Any) -> Tensor:
    x = ctx.need(0)
    axis = int(np.asarray(ctx.static(ctx.need(1), "axis")).reshape(-1)[0])
    attrs = {"axis": norm_axis(axis, x.rank), "exclusive": bool(ctx.attr("exclusive", 0)),
             "reverse": bool(ctx.attr("reverse", 0))}
    return ctx.one("cumsum", [x], attrs)


@handler("LpNormalization")
def lp_normalization(ctx: Any) -> Tensor:
    x = ctx.need(0)
    axis = norm_axis(int(ctx.attr("axis", -1)), x.rank)
    p = int(ctx.attr("p", 2))
    if p == 1:
        norm = _reduce(ctx, "reduce_sum", ctx.one("abs", [x]), [axis], True)
    elif p == 2:
        norm = ctx.one("sqrt", [_reduce(ctx, "reduce_sum", ctx.one("mul", [x, x]), [axis], True)])
    else:
        raise ctx.unsupported(f"p={p} (1 and 2 are supported)")
    # a zero norm gives 0, not NaN (ONNX's reference)
    zero = ctx.one("eq", [norm, scalar(ctx, 0, norm)])
    safe = ctx.one("where", [zero, scalar(ctx, 1, norm), norm])
    return ctx.one("where", [zero, scalar(ctx, 0, x), ctx.one("div", [x, safe])])
