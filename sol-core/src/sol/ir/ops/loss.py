"""Loss ops (module DFP): the negative log-likelihood of class indices, and division by a (batch) size.

MSE, L1, BCE-with-logits and cross-entropy are compositions (the frontend
builds them from these and elementwise ops), so their gradients follow
from the gradient rules of their parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import SolUnsupportedError
from ..graph import Dim, Purpose, Tensor, TensorType
from ..registry import op

REDUCTIONS = ("mean", "sum", "none")


def _check(attrs: dict[str, Any]) -> str:
    reduction = attrs.get("reduction", "mean")
    if reduction not in REDUCTIONS:
        raise SolUnsupportedError(f"loss reduction {reduction!r} is not supported; use one of {', '.join(REDUCTIONS)}")
    return str(reduction)


def _picked(target: np.ndarray, weight: np.ndarray | None, ignore: int) -> tuple[np.ndarray, np.ndarray]:
    """(class index per sample with ignored ones moved to 0, the weight per sample: 0 where ignored)."""
    t = target.astype(np.int64)
    valid = t != ignore
    safe = np.where(valid, t, 0)
    w = (weight.astype(np.float64)[safe] if weight is not None else np.ones(t.shape)) * valid
    return safe, w


@op("nll_loss")
class NllLoss:
    """-logp[n, target[n]] (weighted), reduced: inputs (logp[N, C] or [C], target[N] or [] int, [weight[C]]).

    attrs: reduction (mean: divided by the summed weights of the non-ignored samples; sum; none), ignore_index.
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        logp, target = inputs[0], inputs[1]
        if logp.rank not in (1, 2):
            raise SolUnsupportedError(f"nll_loss over inputs of rank {logp.rank} (only [N, C] and [C] are supported)")
        dims = target.dims if _check(attrs) == "none" else ()
        return [TensorType(tuple(dims), logp.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        logp, target = inputs[0], inputs[1]
        weight = inputs[2] if len(inputs) > 2 else None
        safe, w = _picked(target, weight, int(attrs.get("ignore_index", -100)))
        lp = logp.astype(np.float64)
        picked = np.take_along_axis(lp, safe[:, None], axis=1)[:, 0] if lp.ndim == 2 else lp[safe]
        losses = -picked * w
        reduction = _check(attrs)
        if reduction == "none":
            return [losses.astype(logp.dtype)]
        total = losses.sum()
        return [np.asarray(total / w.sum() if reduction == "mean" else total, dtype=logp.dtype)]

    @staticmethod
    def gradient(layer: Any, grads: list[Tensor | None], b: Any) -> list[Tensor | None]:
        g = grads[0]
        if g is None:
            return [None] * len(layer.inputs)
        logp = layer.inputs[0]
        attrs = dict(layer.attrs, classes=logp.shape[-1])
        rest = [b.fwd(t) for t in layer.inputs[1:]]
        return [b.one("nll_loss_grad", [g, *rest], attrs)] + [None] * (len(layer.inputs) - 1)


@op("nll_loss_grad")
class NllLossGrad:
    """dlogp of nll_loss: inputs (dloss, target, [weight]); attrs: those of the loss and classes (C)."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        g, target = inputs[0], inputs[1]
        classes = Dim(int(attrs["classes"]), Purpose.C)
        return [TensorType((*target.dims, classes), g.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        g, target = inputs[0], inputs[1]
        weight = inputs[2] if len(inputs) > 2 else None
        safe, w = _picked(target, weight, int(attrs.get("ignore_index", -100)))
        reduction = _check(attrs)
        per_sample = g.astype(np.float64) * w if reduction == "none" else float(np.asarray(g).reshape(-1)[0]) * w
        if reduction == "mean":
            per_sample = per_sample / w.sum()
        out = np.zeros((*target.shape, int(attrs["classes"])))
        if target.ndim == 0:
            out[safe] = -per_sample
        else:
            np.put_along_axis(out, safe[:, None], -np.asarray(per_sample)[:, None], axis=1)
        return [out.astype(g.dtype)]


@op("div_size", elementwise=True)
class DivSize:
    """x / attrs["size"], a size that may depend on the wildcard batch (a mean's divisor)."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.asarray(x / np.asarray(int(attrs["size"]), dtype=x.dtype), dtype=x.dtype)]

    @staticmethod
    def gradient(layer: Any, grads: list[Tensor | None], b: Any) -> list[Tensor | None]:
        g = grads[0]
        return [None if g is None else b.one("div_size", [g], dict(layer.attrs))]
