"""Loss ONNX ops (their forward value): negative log-likelihood and softmax cross-entropy."""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.ir import Tensor

from ._registry import handler
from ._util import cast, reshape, unsqueeze


def _nll(ctx: Any, log_prob: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """ONNX's NegativeLogLikelihoodLoss: -log_prob[n, target[n, ...], ...] * weight[target], reduced."""
    reduction = ctx.sattr("reduction", "mean")
    ignore = ctx.attr("ignore_index")
    labels = cast(ctx, target, "int64")
    mask: Tensor | None = None
    if ignore is not None:
        mask = ctx.one("ne", [labels, ctx.const(np.asarray(int(ignore), dtype=np.int64))])
        # ignored labels may lie outside [0, C): read class 0 for them, their weight is 0
        labels = ctx.one("where", [mask, labels, ctx.const(np.asarray(0, dtype=np.int64))])
    picked = ctx.one("gather_elements", [log_prob, unsqueeze(ctx, labels, [1])], {"axis": 1})
    loss = ctx.one("neg", [reshape(ctx, picked, labels.shape)])
    scale = ctx.one("gather", [weight, labels], {"axis": 0}) if weight is not None else None
    if mask is not None:
        keep = cast(ctx, mask, log_prob.dtype)
        scale = keep if scale is None else ctx.one("mul", [scale, keep])
    if scale is not None:
        loss = ctx.one("mul", [loss, scale])
    if reduction == "none":
        return loss
    everything = {"axes": tuple(range(loss.rank)), "keepdims": False}
    total = ctx.one("reduce_sum", [loss], everything)
    if reduction == "sum":
        return total
    if reduction != "mean":
        raise ctx.unsupported(f"reduction {reduction!r}")
    if scale is None:
        return ctx.one("reduce_mean", [loss], everything)
    return ctx.one("div", [total, ctx.one("reduce_sum", [scale], everything)])


@handler("NegativeLogLikelihoodLoss")
def negative_log_likelihood(ctx: Any) -> Tensor:
    return _nll(ctx, ctx.need(0), ctx.need(1), ctx.input(2))


@handler("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(ctx: Any) -> list[Tensor]:
    scores = ctx.need(0)
    log_prob = ctx.one("log_softmax", [scores], {"axis": 1})
    return [_nll(ctx, log_prob, ctx.need(1), ctx.input(2)), log_prob]
