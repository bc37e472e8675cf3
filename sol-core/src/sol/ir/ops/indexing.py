"""Indexing ops (module DFP): gathers by index tensors, arg-reductions, cumulative sums.

Index tensors are integer; a negative index counts from the end of its axis
(numpy's and ONNX's rule). Generated code reports an index outside the axis
through the runtime status (never reads out of bounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import SolUnsupportedError
from ..graph import Dim, Layer, Tensor, TensorType
from ..registry import op
from ._grad import GradBuilder, zeros_like
from ._shapes import normalize_axis, product


@op("gather")
class Gather:
    """x.take(indices, axis): inputs (x, indices); out = x.shape[:axis] + indices.shape + x.shape[axis+1:]."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x, indices = inputs
        axis = normalize_axis(int(attrs["axis"]), x.rank)
        return [TensorType(x.dims[:axis] + indices.dims + x.dims[axis + 1:], x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x, indices = inputs
        return [np.take(x, indices.astype(np.int64), axis=int(attrs["axis"]))]

    @staticmethod
    def gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
        """dx = zeros with dy added at the taken places: the index tensor flattened to one axis, then a scatter-add."""
        dy = grads[0]
        x, indices = layer.inputs
        if dy is None or not b.wants(x):
            return [None, None]
        axis = normalize_axis(int(layer.attrs["axis"]), x.rank)
        count = product(indices.shape)
        flat = (*x.shape[:axis], count, *x.shape[axis + 1:])
        dy = b.one("reshape", [dy], {"shape": flat})
        idx = b.one("reshape", [b.fwd(indices)], {"shape": (1,) * axis + (count,) + (1,) * (x.rank - axis - 1)})
        idx = b.one("expand", [idx], {"shape": flat})
        return [b.one("scatter_elements", [zeros_like(b, x), idx, dy], {"axis": axis, "reduction": "add"}), None]


@op("gather_elements")
class GatherElements:
    """out[i] = x[i with i[axis] replaced by indices[i]]: inputs (x, indices); out has the shape of indices.

    indices may be smaller than x in the other dims (torch.gather's rule; ONNX's GatherElements has them equal).
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x, indices = inputs
        if x.rank != indices.rank:
            raise SolUnsupportedError(f"gather_elements needs indices of rank {x.rank}, got {indices.rank}")
        return [TensorType(indices.dims, x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x, indices = inputs
        axis = normalize_axis(int(attrs["axis"]), x.ndim)
        idx = indices.astype(np.int64)
        idx = np.where(idx < 0, idx + x.shape[axis], idx)
        # torch.gather's index may be smaller than x in the other dims: x is read at the index's positions there
        x = x[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(idx.shape))]
        return [np.take_along_axis(x, idx, axis=axis)]

    @staticmethod
    def gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
        dy = grads[0]
        x, indices = layer.inputs
        if dy is None or not b.wants(x):
            return [None, None]
        attrs = {"axis": layer.attrs["axis"], "reduction": "add"}
        return [b.one("scatter_elements", [zeros_like(b, x), b.fwd(indices), dy], attrs), None]


def _arg_infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x = inputs[0]
    axis = normalize_axis(int(attrs["axis"]), x.rank)
    if attrs.get("keepdims", True):
        dims = tuple(Dim(1, d.purpose) if i == axis else d for i, d in enumerate(x.dims))
    else:
        dims = tuple(d for i, d in enumerate(x.dims) if i != axis)
    return [TensorType(dims, "int64")]


def _arg_reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any], fn: Any) -> list[np.ndarray]:
    x = inputs[0]
    axis = normalize_axis(int(attrs["axis"]), x.ndim)
    if attrs.get("select_last_index", False):
        flipped = np.flip(x, axis=axis)
        result = x.shape[axis] - 1 - fn(flipped, axis=axis)
    else:
        result = fn(x, axis=axis)
    if attrs.get("keepdims", True):
        result = np.expand_dims(result, axis)
    return [np.asarray(result, dtype=np.int64)]


@op("argmax")
class ArgMax:
    """Index of the maximum along attrs["axis"] (int64); attrs: keepdims (default true), select_last_index."""

    infer = staticmethod(_arg_infer)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return _arg_reference(inputs, attrs, np.argmax)


@op("argmin")
class ArgMin:
    """Index of the minimum along attrs["axis"] (int64); attrs: keepdims (default true), select_last_index."""

    infer = staticmethod(_arg_infer)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return _arg_reference(inputs, attrs, np.argmin)


@op("cumsum")
class CumSum:
    """Cumulative sum along attrs["axis"]; attrs: exclusive (start at 0), reverse (from the end)."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [cumulative(inputs[0], attrs, np.cumsum, 0)]


def cumulative(x: np.ndarray, attrs: dict[str, Any], scan: Any, identity: float) -> np.ndarray:
    """numpy reference of cumsum/cumprod: ``scan`` along attrs["axis"], optionally exclusive and/or reversed."""
    axis = normalize_axis(int(attrs["axis"]), x.ndim)
    reverse = attrs.get("reverse", False)
    y = np.flip(x, axis) if reverse else x
    if attrs.get("exclusive", False):  # shift by one, the scan's identity first
        first = np.full_like(np.take(y, [0], axis=axis), identity)
        y = np.concatenate([first, np.take(y, np.arange(y.shape[axis] - 1), axis=axis)], axis=axis)
    total = scan(y, axis=axis, dtype=x.dtype)
    return np.ascontiguousarray(np.flip(total, axis) if reverse else total)
