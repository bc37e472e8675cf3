"""Gradient rules of the reductions and softmaxes: dy broadcast back over the reduced dims."""

from __future__ import annotations

from ..graph import Layer, Tensor
from ..registry import gradient
from . import loss, reduction, reduction_extra  # noqa: F401  (the ops must be registered before their rules)
from ._grad import GradBuilder, masked, mul
from ._shapes import normalize_axis, product

Grads = list[Tensor | None]


def _axes(layer: Layer) -> tuple[int, ...]:
    rank = layer.inputs[0].rank
    return tuple(sorted({normalize_axis(a, rank) for a in layer.attrs["axes"]})) if rank else ()


def _kept(b: GradBuilder, t: Tensor, layer: Layer) -> Tensor:
    """A reduced value (dy or y) with the reduced dims back as size 1."""
    x = layer.inputs[0]
    if layer.attrs.get("keepdims", False):
        return t
    axes = _axes(layer)
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    return b.one("reshape", [t], {"shape": shape})


def _broadcast(b: GradBuilder, t: Tensor, like: Tensor) -> Tensor:
    return b.one("expand", [t], {"shape": like.shape})


@gradient("reduce_sum")
def _sum(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    return [None if dy is None else _broadcast(b, _kept(b, dy, layer), layer.inputs[0])]


@gradient("reduce_mean")
def _mean(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    x = layer.inputs[0]
    count = product([x.shape[a] for a in _axes(layer)])
    scaled = b.one("div_size", [_kept(b, dy, layer)], {"size": count})
    return [_broadcast(b, scaled, x)]


@gradient("reduce_max", "reduce_min")
def _extremum(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    x = b.fwd(layer.inputs[0])
    hit = b.one("eq", [x, _kept(b, b.fwd(layer.outputs[0]), layer)])
    # ties share the gradient evenly (PyTorch's amax/amin rule)
    count = b.one("reduce_sum", [b.one("cast", [hit], {"dtype": dy.dtype})], {"axes": _axes(layer), "keepdims": True})
    return [masked(b, hit, b.one("div", [_kept(b, dy, layer), count]))]


@gradient("reduce_prod")
def _prod(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    # y / x: exact where x != 0 (zeros in the product are not handled)
    total = mul(b, _kept(b, dy, layer), _kept(b, b.fwd(layer.outputs[0]), layer))
    return [b.one("div", [total, b.fwd(layer.inputs[0])])]


@gradient("softmax")
def _softmax(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    y = b.fwd(layer.outputs[0])
    axis = normalize_axis(int(layer.attrs["axis"]), y.rank)
    dot = b.one("reduce_sum", [b.one("mul", [dy, y])], {"axes": (axis,), "keepdims": True})
    return [b.one("mul", [y, b.one("sub", [dy, dot])])]


@gradient("log_softmax")
def _log_softmax(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    y = b.fwd(layer.outputs[0])
    axis = normalize_axis(int(layer.attrs["axis"]), y.rank)
    total = b.one("reduce_sum", [dy], {"axes": (axis,), "keepdims": True})
    return [b.one("sub", [dy, b.one("mul", [b.one("exp", [y]), total])])]
