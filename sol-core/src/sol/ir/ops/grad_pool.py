"""Gradient rules of the pooling ops: each maps to its `pool_grad` op."""

from __future__ import annotations

from ..graph import Layer, Tensor
from ..registry import gradient
from . import pool_grad, pooling  # noqa: F401  (the ops must be registered before their rules)
from ._grad import GradBuilder

Grads = list[Tensor | None]


@gradient("max_pool", "adaptive_max_pool")
def _max_pool(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    x = layer.inputs[0]
    return [b.one(f"{layer.op}_grad", [dy, b.fwd(x)], dict(layer.attrs, input_shape=x.shape))]


@gradient("avg_pool", "adaptive_avg_pool")
def _avg_pool(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    return [b.one(f"{layer.op}_grad", [dy], dict(layer.attrs, input_shape=layer.inputs[0].shape))]
