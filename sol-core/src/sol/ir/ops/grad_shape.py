"""Gradient rules of the data-movement ops: each moves dy back to where the forward took it from."""

from __future__ import annotations

from ...errors import SolUnsupportedError
from ..graph import Layer, Tensor, as_size
from ..registry import gradient
from . import indexing, misc, shape  # noqa: F401  (the ops must be registered before their rules)
from ._grad import GradBuilder, no_gradient, sum_to, zeros_like
from ._shapes import normalize_axis

Grads = list[Tensor | None]


@gradient("reshape")
def _reshape(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    return [None if dy is None else b.one("reshape", [dy], {"shape": layer.inputs[0].shape})]


@gradient("permute")
def _permute(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    perm = [normalize_axis(p, dy.rank) for p in layer.attrs["perm"]]
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [b.one("permute", [dy], {"perm": tuple(inverse)})]


@gradient("concat")
def _concat(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None] * len(layer.inputs)
    axis = normalize_axis(layer.attrs["axis"], dy.rank)
    sizes = [t.shape[axis] for t in layer.inputs]
    if all(isinstance(s, int) for s in sizes):
        # one split instead of a slice per input: one pass over dy
        parts = b.layer("split", [dy], {"axis": axis, "sizes": tuple(sizes)})
        return [p if b.wants(t) else None for p, t in zip(parts, layer.inputs, strict=True)]
    out: Grads = []
    start = 0
    for t, size in zip(layer.inputs, sizes, strict=True):
        stop = as_size(start + size)
        out.append(b.one("slice", [dy], {"axis": axis, "start": start, "stop": stop, "step": 1}) if b.wants(t) else None)
        start = stop
    return out


@gradient("split")
def _split(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    if all(g is None for g in grads):
        return [None]
    parts = [g if g is not None else zeros_like(b, t) for g, t in zip(grads, layer.outputs, strict=True)]
    return [b.one("concat", parts, {"axis": layer.attrs["axis"]})]


@gradient("slice")
def _slice(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    x = layer.inputs[0]
    axis = normalize_axis(layer.attrs["axis"], x.rank)
    start, stop, step = layer.attrs["start"], layer.attrs["stop"], int(layer.attrs["step"])
    size = x.shape[axis]
    if not all(isinstance(v, int) for v in (start, stop, size)):
        raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of a slice along the batch dim is not "
                                  "supported yet")
    start, size = int(start), int(size)
    g = dy
    end = int(stop)
    if step > 1:
        # interleave dy with step - 1 zeros after each element: [.., n, ..] -> [.., n, 1, ..] padded to
        # [.., n, step, ..] -> [.., n * step, ..], whose element k * step is dy's k; the zeros after the last one
        # that run past x's end are cut
        n = int(dy.shape[axis])
        inner = tuple(dy.shape[axis + 1:])
        g = b.one("reshape", [g], {"shape": (*dy.shape[:axis + 1], 1, *inner)})
        spread = [(0, 0)] * (x.rank + 1)
        spread[axis + 1] = (0, step - 1)
        g = b.one("pad", [g], {"pads": tuple(spread), "mode": "constant", "value": 0.0})
        g = b.one("reshape", [g], {"shape": (*dy.shape[:axis], n * step, *inner)})
        end = min(start + n * step, size)
        if end < start + n * step:
            g = b.one("slice", [g], {"axis": axis, "start": 0, "stop": end - start, "step": 1})
    pads = [(0, 0)] * x.rank
    pads[axis] = (start, size - end)
    return [b.one("pad", [g], {"pads": tuple(pads), "mode": "constant", "value": 0.0})]


@gradient("pad")
def _pad(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    if layer.attrs.get("mode", "constant") != "constant":
        raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of {layer.attrs['mode']} padding is not supported yet")
    g = dy
    for axis, (begin, end) in enumerate(layer.attrs["pads"]):
        if begin or end:
            g = b.one("slice", [g], {"axis": axis, "start": int(begin), "stop": as_size(g.shape[axis] - int(end)), "step": 1})
    return [g]


@gradient("expand")
def _expand(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    return [None if dy is None else sum_to(b, dy, layer.inputs[0].shape)]


@gradient("channel_shuffle")
def _channel_shuffle(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    groups = int(layer.attrs["groups"])
    return [b.one("channel_shuffle", [dy], {"groups": int(dy.shape[1]) // groups})]


@gradient("cumsum")
def _cumsum(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None]
    attrs = dict(layer.attrs, reverse=not layer.attrs.get("reverse", False))
    return [b.one("cumsum", [dy], attrs)]


gradient("argmax", "argmin")(no_gradient)
