"""Normalization ONNX ops (inference form; BatchNormalization also in training mode)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.ir import Tensor

from ..errors import NeedsStaticBatch
from ._registry import handler
from ._util import norm_axis, reshape, scalar


@handler("BatchNormalization")
def batch_norm(ctx: Any) -> Tensor | list[Tensor]:
    x, scale, bias, mean, var = (ctx.need(i) for i in range(5))
    if ctx.attr("training_mode", 0):
        return _batch_norm_training(ctx, x, scale, bias, mean, var)
    if any(ctx.wants_output(i) for i in range(1, ctx.num_outputs)):
        raise ctx.unsupported("the running statistics outputs of opset < 14 (training)")
    return ctx.one("batch_norm", [x, mean, var, scale, bias], {"eps": float(ctx.attr("epsilon", 1e-5))})


def _batch_norm_training(ctx: Any, x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor) -> list[Tensor]:
    """training_mode=1: normalise with the batch's statistics (batch_norm_train); the running statistics
    outputs are ``running * momentum + batch * (1 - momentum)``, with the batch's biased variance."""
    if not x.is_static:
        raise NeedsStaticBatch("batch statistics over a wildcard batch")
    momentum = float(ctx.attr("momentum", 0.9))
    y, batch_mean, _, unbiased = ctx.layer("batch_norm_train", [x, scale, bias], {"eps": float(ctx.attr("epsilon", 1e-5))})
    count = int(np.prod([int(s) for i, s in enumerate(x.shape) if i != 1]))
    batch_var = ctx.one("mul", [unbiased, scalar(ctx, (count - 1) / count, x)])

    def running(old: Tensor, batch: Tensor) -> Tensor:
        return ctx.one("add", [ctx.one("mul", [old, scalar(ctx, momentum, x)]),
                               ctx.one("mul", [batch, scalar(ctx, 1.0 - momentum, x)])])

    return [y, running(mean, batch_mean), running(var, batch_var)]


@handler("InstanceNormalization")
def instance_norm(ctx: Any) -> Tensor:
    x, scale, bias = ctx.need(0), ctx.need(1), ctx.need(2)
    groups = x.shape[1]
    return ctx.one("group_norm", [x, scale, bias], {"num_groups": groups, "eps": float(ctx.attr("epsilon", 1e-5))})


def _per_channel(ctx: Any, t: Tensor, x: Tensor) -> Tensor:
    """A [C] tensor as [C, 1, ...] for broadcasting against NC* ``x``."""
    return reshape(ctx, t, (t.shape[0],) + (1,) * (x.rank - 2))


@handler("GroupNormalization")
def group_norm(ctx: Any) -> Tensor:
    x, scale, bias = ctx.need(0), ctx.need(1), ctx.need(2)
    groups = int(ctx.attr("num_groups"))
    channels = int(x.shape[1])
    y = ctx.one("group_norm", [x], {"num_groups": groups, "eps": float(ctx.attr("epsilon", 1e-5))})
    if int(scale.shape[0]) != channels:  # opset 18: one scale/bias per group, repeated over its channels
        index = ctx.const(np.arange(channels, dtype=np.int64) // (channels // groups))
        scale = ctx.one("gather", [scale, index], {"axis": 0})
        bias = ctx.one("gather", [bias, index], {"axis": 0})
    return ctx.one("add", [ctx.one("mul", [y, _per_channel(ctx, scale, x)]), _per_channel(ctx, bias, x)])


def _moments(ctx: Any, x: Tensor, axes: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor]:
    """(mean, 1/std) over ``axes``, kept as size-1 dims."""
    mean = ctx.one("reduce_mean", [x], {"axes": axes, "keepdims": True})
    centred = ctx.one("sub", [x, mean])
    var = ctx.one("reduce_mean", [ctx.one("mul", [centred, centred])], {"axes": axes, "keepdims": True})
    return mean, ctx.one("rsqrt", [ctx.one("add", [var, scalar(ctx, eps, var)])])


@handler("LayerNormalization")
def layer_norm(ctx: Any) -> list[Tensor]:
    x, scale, bias = ctx.need(0), ctx.input(1), ctx.input(2)
    axis = norm_axis(int(ctx.attr("axis", -1)), x.rank)
    eps = float(ctx.attr("epsilon", 1e-5))
    inner = tuple(x.shape[axis:])
    axes = tuple(range(axis, x.rank))
    if ctx.wants_output(1) or ctx.wants_output(2) or x.dtype != "float32":
        mean, inv_std = _moments(ctx, x, axes, eps)
        y = ctx.one("mul", [ctx.one("sub", [x, mean]), inv_std])
        if scale is not None:
            y = ctx.one("mul", [y, scale])
        if bias is not None:
            y = ctx.one("add", [y, bias])
        return [y, mean, inv_std]
    # the registry op wants affine parameters of the normalised shape
    operands = [x] + [t if tuple(t.shape) == inner else ctx.one("expand", [t], {"shape": inner})
                      for t in (scale, bias) if t is not None]
    if scale is None and bias is not None:
        raise ctx.unsupported("a bias without a scale")
    return [ctx.one("layer_norm", operands, {"normalized_ndim": len(inner), "eps": eps})]


@handler("RMSNormalization")
def rms_norm(ctx: Any) -> Tensor:
    x, scale = ctx.need(0), ctx.need(1)
    axis = norm_axis(int(ctx.attr("axis", -1)), x.rank)
    eps = float(ctx.attr("epsilon", 1e-5))
    mean_square = ctx.one("reduce_mean", [ctx.one("mul", [x, x])], {"axes": tuple(range(axis, x.rank)), "keepdims": True})
    inv = ctx.one("rsqrt", [ctx.one("add", [mean_square, scalar(ctx, eps, mean_square)])])
    return ctx.one("mul", [ctx.one("mul", [x, inv]), scale])


@handler("MeanVarianceNormalization")
def mean_variance_norm(ctx: Any) -> Tensor:
    x = ctx.need(0)
    axes = tuple(norm_axis(int(a), x.rank) for a in ctx.attr("axes", [0, 2, 3]))
    mean, inv_std = _moments(ctx, x, axes, 1e-9)
    return ctx.one("mul", [ctx.one("sub", [x, mean]), inv_std])
