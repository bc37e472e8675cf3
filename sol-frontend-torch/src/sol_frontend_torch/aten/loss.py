"""Loss functions: cross-entropy, NLL, MSE, L1 and BCE-with-logits, built from SOL ops.

PyTorch passes the reduction as an int (0 none, 1 mean, 2 sum). Only
cross-entropy/NLL over class indices use a dedicated op (`nll_loss`);
the rest are elementwise compositions whose gradients follow from their
parts' gradient rules.
"""

from __future__ import annotations

from typing import Any

from sol.errors import SolUnsupportedError
from sol.ir import Tensor, TensorType
from sol.ir.ops import broadcast

from ._registry import Context, aten

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(value: Any) -> str:
    if isinstance(value, str):
        return value
    return _REDUCTIONS[int(value)]


def _reduce(cx: Context, loss: Tensor, reduction: Any) -> Tensor:
    mode = _reduction(reduction)
    if mode == "none" or loss.rank == 0:
        return loss
    return cx.one("reduce_mean" if mode == "mean" else "reduce_sum", [loss], {"axes": tuple(range(loss.rank)), "keepdims": False})


def _nll(cx: Context, logp: Tensor, target: Tensor, weight: Tensor | None, reduction: Any, ignore_index: int) -> Tensor:
    if logp.rank not in (1, 2):
        raise SolUnsupportedError("NLL/cross-entropy over spatial dims (inputs of rank > 2) is not supported yet")
    inputs = [logp, target] + ([weight] if weight is not None else [])
    return cx.one("nll_loss", inputs, {"reduction": _reduction(reduction), "ignore_index": int(ignore_index)})


@aten("cross_entropy_loss")
def cross_entropy(cx: Context, x: Tensor, target: Tensor, weight: Tensor | None = None, reduction: Any = 1,
                  ignore_index: int = -100, label_smoothing: float = 0.0) -> Tensor:
    if label_smoothing:
        raise SolUnsupportedError("cross-entropy with label_smoothing is not supported yet")
    logp = cx.one("log_softmax", [x], {"axis": 1 if x.rank > 1 else 0})
    if target.dtype.startswith("float"):  # class probabilities
        if weight is not None:
            raise SolUnsupportedError("cross-entropy with class probabilities and a weight is not supported yet")
        per_sample = cx.one("neg", [cx.one("reduce_sum", [cx.one("mul", [logp, target])],
                                           {"axes": (1 if x.rank > 1 else 0,), "keepdims": False})])
        return _reduce(cx, per_sample, reduction)
    return _nll(cx, logp, target, weight, reduction, ignore_index)


@aten("nll_loss", "nll_loss_nd")
def nll_loss(cx: Context, logp: Tensor, target: Tensor, weight: Tensor | None = None, reduction: Any = 1,
             ignore_index: int = -100) -> Tensor:
    return _nll(cx, logp, target, weight, reduction, ignore_index)


@aten("nll_loss_forward")
def nll_loss_forward(cx: Context, logp: Tensor, target: Tensor, weight: Tensor | None, reduction: Any,
                     ignore_index: int) -> tuple[Tensor, None]:
    return _nll(cx, logp, target, weight, reduction, ignore_index), None  # total_weight is for PyTorch's own backward


@aten("mse_loss")
def mse_loss(cx: Context, a: Tensor, b: Tensor, reduction: Any = 1) -> Tensor:
    d = cx.one("sub", [a, b])
    return _reduce(cx, cx.one("mul", [d, d]), reduction)


@aten("l1_loss")
def l1_loss(cx: Context, a: Tensor, b: Tensor, reduction: Any = 1) -> Tensor:
    return _reduce(cx, cx.one("abs", [cx.one("sub", [a, b])]), reduction)


@aten("binary_cross_entropy_with_logits")
def bce_with_logits(cx: Context, x: Tensor, target: Tensor, weight: Tensor | None = None, pos_weight: Tensor | None = None,
                    reduction: Any = 1) -> Tensor:
    """(1 - t) * x + (1 + (pw - 1) * t) * softplus(-x): stable for any x, gradient sigmoid(x) - t (times weights)."""
    one = cx.const(1.0)
    softplus = cx.one("softplus", [cx.one("neg", [x])], {"beta": 1.0, "threshold": 20.0})
    if pos_weight is not None:
        factor = cx.one("add", [one, cx.one("mul", [cx.one("sub", [pos_weight, one]), target])])
        softplus = cx.one("mul", [factor, softplus])
    loss = cx.one("add", [cx.one("mul", [cx.one("sub", [one, target]), x]), softplus])
    if weight is not None:
        loss = cx.one("mul", [loss, weight])
    return _reduce(cx, loss, reduction)


@aten("broadcast_tensors")
def broadcast_tensors(cx: Context, tensors: list[Tensor]) -> list[Tensor]:
    shape = tuple(d.size for d in broadcast([TensorType(t.dims, t.dtype) for t in tensors]))
    return [t if t.shape == shape else cx.one("expand", [t], {"shape": shape}) for t in tensors]
