"""Gradient rules of the inference normalisations (batch_norm with running statistics, layer_norm, group_norm).

layer_norm and group_norm recompute their row statistics in the backward
(two cheap reductions) instead of saving them.
"""

from __future__ import annotations

from ..graph import Layer, Tensor
from ..registry import gradient
from . import normalization  # noqa: F401  (the ops must be registered before their rules)
from ._grad import GradBuilder, mul, scalar
from ._shapes import product

Grads = list[Tensor | None]


def _optional(layer: Layer, index: int) -> Tensor | None:
    return layer.inputs[index] if len(layer.inputs) > index else None


def _per_channel(b: GradBuilder, t: Tensor, rank: int) -> Tensor:
    return b.one("reshape", [t], {"shape": (1, t.shape[0]) + (1,) * (rank - 2)})


@gradient("batch_norm")
def _batch_norm(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    out: Grads = [None] * len(layer.inputs)
    if dy is None:
        return out
    x = layer.inputs[0]
    var = b.fwd(layer.inputs[2])
    rstd = b.one("rsqrt", [b.one("add", [var, scalar(b, layer.attrs["eps"], var)])])
    weight = _optional(layer, 3)
    scale = rstd if weight is None else b.one("mul", [rstd, b.fwd(weight)])
    if b.wants(x):
        out[0] = b.one("mul", [dy, _per_channel(b, scale, x.rank)])
    axes = (0, *range(2, x.rank))
    mean = layer.inputs[1]
    centered = b.one("sub", [b.fwd(x), _per_channel(b, b.fwd(mean), x.rank)])
    if weight is not None and b.wants(weight):
        xhat = b.one("mul", [centered, _per_channel(b, rstd, x.rank)])
        out[3] = b.one("reduce_sum", [b.one("mul", [dy, xhat])], {"axes": axes, "keepdims": False})
    if b.wants(mean):  # running statistics are buffers in PyTorch, but a graph may feed computed values here
        out[1] = b.one("neg", [b.one("mul", [b.one("reduce_sum", [dy], {"axes": axes, "keepdims": False}), scale])])
    if b.wants(layer.inputs[2]):
        dscale = b.one("reduce_sum", [b.one("mul", [dy, centered])], {"axes": axes, "keepdims": False})
        out[2] = mul(b, dscale, scale, rstd, rstd, scalar(b, -0.5, var))
    bias = _optional(layer, 4)
    if bias is not None and b.wants(bias):
        out[4] = b.one("reduce_sum", [dy], {"axes": axes, "keepdims": False})
    return out


def _normalised_rows(b: GradBuilder, x: Tensor, axes: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor]:
    """(xhat, rstd) over ``axes`` (kept as size 1)."""
    mean = b.one("reduce_mean", [x], {"axes": axes, "keepdims": True})
    centered = b.one("sub", [x, mean])
    var = b.one("reduce_mean", [b.one("mul", [centered, centered])], {"axes": axes, "keepdims": True})
    rstd = b.one("rsqrt", [b.one("add", [var, scalar(b, eps, x)])])
    return b.one("mul", [centered, rstd]), rstd


def _row_input_grad(b: GradBuilder, g: Tensor, xhat: Tensor, rstd: Tensor, axes: tuple[int, ...]) -> Tensor:
    """dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) over the normalised axes."""
    mean_g = b.one("reduce_mean", [g], {"axes": axes, "keepdims": True})
    mean_gx = b.one("reduce_mean", [b.one("mul", [g, xhat])], {"axes": axes, "keepdims": True})
    return b.one("mul", [rstd, b.one("sub", [b.one("sub", [g, mean_g]), b.one("mul", [xhat, mean_gx])])])


@gradient("layer_norm")
def _layer_norm(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    out: Grads = [None] * len(layer.inputs)
    if dy is None:
        return out
    x = layer.inputs[0]
    k = int(layer.attrs["normalized_ndim"])
    axes = tuple(range(x.rank - k, x.rank))
    xhat, rstd = _normalised_rows(b, b.fwd(x), axes, layer.attrs["eps"])
    weight, bias = _optional(layer, 1), _optional(layer, 2)
    g = dy if weight is None else b.one("mul", [dy, b.fwd(weight)])
    if b.wants(x):
        out[0] = _row_input_grad(b, g, xhat, rstd, axes)
    lead = tuple(range(x.rank - k))
    if weight is not None and b.wants(weight):
        out[1] = b.one("reduce_sum", [b.one("mul", [dy, xhat])], {"axes": lead, "keepdims": False}) if lead else b.one("mul", [dy, xhat])
    if bias is not None and b.wants(bias):
        out[2] = b.one("reduce_sum", [dy], {"axes": lead, "keepdims": False}) if lead else dy
    return out


@gradient("group_norm")
def _group_norm(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    out: Grads = [None] * len(layer.inputs)
    if dy is None:
        return out
    x = layer.inputs[0]
    groups = int(layer.attrs["num_groups"])
    grouped = (x.shape[0], groups, product(x.shape[1:]) // groups if isinstance(product(x.shape[1:]), int) else None)
    if grouped[2] is None:
        from ...errors import SolUnsupportedError

        raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of group_norm needs static channel/pixel sizes")
    xg = b.one("reshape", [b.fwd(x)], {"shape": grouped})
    xhat_g, rstd = _normalised_rows(b, xg, (2,), layer.attrs["eps"])
    xhat = b.one("reshape", [xhat_g], {"shape": x.shape})
    weight, bias = _optional(layer, 1), _optional(layer, 2)
    g = dy if weight is None else b.one("mul", [dy, _per_channel(b, b.fwd(weight), x.rank)])
    if b.wants(x):
        gg = b.one("reshape", [g], {"shape": grouped})
        out[0] = b.one("reshape", [_row_input_grad(b, gg, xhat_g, rstd, (2,))], {"shape": x.shape})
    axes = (0, *range(2, x.rank))
    if weight is not None and b.wants(weight):
        out[1] = b.one("reduce_sum", [b.one("mul", [dy, xhat])], {"axes": axes, "keepdims": False})
    if bias is not None and b.wants(bias):
        out[2] = b.one("reduce_sum", [dy], {"axes": axes, "keepdims": False})
    return out
