"""Scatters and N-d gathers (module DFP): ScatterElements, ScatterND, GatherND of ONNX / torch.scatter.

A scatter's result is its ``data`` input with the ``updates`` written (or
combined with attrs["reduction"]: "none", "add", "mul", "max", "min") at the
places ``indices`` name, in index order: where indices repeat, the last
update wins ("none") or all of them are combined. Negative indices count from
the end of their axis; an index outside its axis is reported through the
runtime status by the generated code.

Gradient rules: dy flows to ``data`` where nothing was written over it and
to ``updates`` through the matching gather, for reductions "none" and "add";
the other reductions have no gradient rule (SolUnsupportedError naming the
layer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import SolUnsupportedError
from ..graph import Layer, Tensor, TensorType
from ..registry import op
from ._grad import GradBuilder, zeros_like
from ._shapes import normalize_axis

REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(attrs: dict[str, Any]) -> str:
    reduction = str(attrs.get("reduction", "none"))
    if reduction not in REDUCTIONS:
        raise SolUnsupportedError(f"scatter reduction {reduction!r} (supported: {', '.join(REDUCTIONS)})")
    return reduction


def _combine(out: np.ndarray, index: tuple[Any, ...], value: Any, reduction: str) -> None:
    if reduction == "none":
        out[index] = value
    else:
        out[index] = _UFUNCS[reduction](out[index], value)


def _scatter_gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder, gather: str,
                      gather_attrs: dict[str, Any]) -> list[Tensor | None]:
    dy = grads[0]
    data, indices, updates = layer.inputs
    if dy is None:
        return [None, None, None]
    reduction = _reduction(layer.attrs)
    if reduction not in ("none", "add"):
        raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of {layer.op} with reduction {reduction!r} "
                                  "is not supported")
    idx = b.fwd(indices)
    d_data = None
    if b.wants(data):
        d_data = dy if reduction == "add" else b.one(layer.op, [dy, idx, zeros_like(b, updates)], dict(layer.attrs))
    d_updates = b.one(gather, [dy, idx], gather_attrs) if b.wants(updates) else None
    return [d_data, None, d_updates]


@op("scatter_elements")
class ScatterElements:
    """data with out[i with i[axis] = indices[j]] = updates[j] for every j: inputs (data, indices, updates).

    indices and updates have one shape, of data's rank; attrs: axis, reduction ("none", "add", "mul",
    "max", "min"; in index order, so the last of repeated indices wins with "none").
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        data, indices, updates = inputs
        _reduction(attrs)
        if not (data.rank == indices.rank == updates.rank):
            raise SolUnsupportedError(f"scatter_elements needs data, indices and updates of one rank, got "
                                      f"{data.rank}, {indices.rank}, {updates.rank}")
        if updates.dtype != data.dtype:
            raise SolUnsupportedError(f"scatter_elements: updates are {updates.dtype}, data {data.dtype}")
        return [data]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        data, indices, updates = inputs
        axis = normalize_axis(int(attrs["axis"]), data.ndim)
        reduction = _reduction(attrs)
        out = np.array(data, copy=True)
        idx = indices.astype(np.int64)
        idx = np.where(idx < 0, idx + data.shape[axis], idx)
        for j in np.ndindex(*idx.shape):
            target = list(j)
            target[axis] = int(idx[j])
            _combine(out, tuple(target), updates[j], reduction)
        return [out]

    @staticmethod
    def gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
        return _scatter_gradient(layer, grads, b, "gather_elements", {"axis": layer.attrs["axis"]})


def _nd_depth(data: TensorType | np.ndarray, indices: TensorType | np.ndarray, what: str) -> int:
    rank = data.rank if isinstance(data, TensorType) else data.ndim
    depth = indices.shape[-1] if (indices.rank if isinstance(indices, TensorType) else indices.ndim) else None
    if not isinstance(depth, (int, np.integer)) or not 1 <= int(depth) <= rank:
        raise SolUnsupportedError(f"{what}: the last dim of indices ({depth}) must be a fixed size in 1..{rank}")
    return int(depth)


@op("scatter_nd")
class ScatterND:
    """data with out[indices[j]] = updates[j] for every index tuple j: inputs (data, indices, updates).

    indices[..., k] name the first k dims of data; updates have the shape indices.shape[:-1] +
    data.shape[k:]; attrs: reduction ("none", "add", "mul", "max", "min"; in index order).
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        data, indices, updates = inputs
        _reduction(attrs)
        depth = _nd_depth(data, indices, "scatter_nd")
        if updates.rank != indices.rank - 1 + data.rank - depth:
            raise SolUnsupportedError(f"scatter_nd: updates of rank {updates.rank}, expected "
                                      f"{indices.rank - 1 + data.rank - depth}")
        if updates.dtype != data.dtype:
            raise SolUnsupportedError(f"scatter_nd: updates are {updates.dtype}, data {data.dtype}")
        return [data]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        data, indices, updates = inputs
        reduction = _reduction(attrs)
        depth = _nd_depth(data, indices, "scatter_nd")
        out = np.array(data, copy=True)
        idx = indices.astype(np.int64)
        idx = np.where(idx < 0, idx + np.asarray(data.shape[:depth], dtype=np.int64), idx)
        for j in np.ndindex(*idx.shape[:-1]):
            _combine(out, tuple(int(v) for v in idx[j]), updates[j], reduction)
        return [out]

    @staticmethod
    def gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
        return _scatter_gradient(layer, grads, b, "gather_nd", {"batch_dims": 0})


@op("gather_nd")
class GatherND:
    """out[j] = data[indices[j]] over index tuples j: inputs (data, indices); attrs: batch_dims (default 0).

    With b batch dims, indices[..., k] name k dims of data after the b leading ones both share;
    out has the shape indices.shape[:-1] + data.shape[b + k:].
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        data, indices = inputs
        batch = int(attrs.get("batch_dims", 0))
        depth = _nd_depth(data, indices, "gather_nd")
        if batch + depth > data.rank or batch >= indices.rank:
            raise SolUnsupportedError(f"gather_nd: batch_dims {batch} with {depth}-tuples of indices into rank {data.rank}")
        return [TensorType(indices.dims[:-1] + data.dims[batch + depth:], data.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        data, indices = inputs
        batch = int(attrs.get("batch_dims", 0))
        depth = _nd_depth(data, indices, "gather_nd")
        idx = indices.astype(np.int64)
        idx = np.where(idx < 0, idx + np.asarray(data.shape[batch:batch + depth], dtype=np.int64), idx)
        out = np.empty(idx.shape[:-1] + data.shape[batch + depth:], dtype=data.dtype)
        for j in np.ndindex(*idx.shape[:-1]):
            out[j] = data[tuple(j[:batch]) + tuple(int(v) for v in idx[j])]
        return [out]

    @staticmethod
    def gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
        dy = grads[0]
        data, indices = layer.inputs
        if dy is None or not b.wants(data):
            return [None, None]
        if int(layer.attrs.get("batch_dims", 0)):
            raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of gather_nd with batch_dims is not supported")
        return [b.one("scatter_nd", [zeros_like(b, data), b.fwd(indices), dy], {"reduction": "add"}), None]
