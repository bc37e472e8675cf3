"""Ops along one axis (module DFP): the k largest/smallest elements (topk) and the cumulative product.

``topk`` has a fixed k (an attribute: the output shape depends on it); ties
keep the lower index first (ONNX's and PyTorch's rule), the outputs are
(values, int64 indices) sorted by value. ``cumprod`` mirrors ``cumsum``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import SolUnsupportedError
from ..graph import Dim, Layer, Tensor, TensorType
from ..registry import op
from ._grad import GradBuilder, zeros_like
from ._shapes import normalize_axis
from .indexing import cumulative


@op("topk")
class TopK:
    """The k largest (attrs["largest"], default true) or smallest elements along attrs["axis"], sorted.

    Outputs (values, indices int64), both with the axis cut to attrs["k"]; equal values keep index order.
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        axis = normalize_axis(int(attrs["axis"]), x.rank)
        k = int(attrs["k"])
        size = x.dims[axis].size
        if k < 0 or (isinstance(size, int) and k > size):
            raise SolUnsupportedError(f"topk: k={k} outside 0..{size}")
        dims = tuple(Dim(k, d.purpose) if i == axis else d for i, d in enumerate(x.dims))
        return [TensorType(dims, x.dtype), TensorType(dims, "int64")]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axis = normalize_axis(int(attrs["axis"]), x.ndim)
        k = int(attrs["k"])
        key = -x if attrs.get("largest", True) else x
        order = np.argsort(key, axis=axis, kind="stable")  # stable: ties keep index order
        indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
        return [np.take_along_axis(x, indices, axis=axis), indices]

    @staticmethod
    def gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
        dy = grads[0]
        x = layer.inputs[0]
        if dy is None or not b.wants(x):
            return [None]
        indices = b.fwd(layer.outputs[1])
        return [b.one("scatter_elements", [zeros_like(b, x), indices, dy], {"axis": layer.attrs["axis"], "reduction": "add"})]


@op("cumprod")
class CumProd:
    """Cumulative product along attrs["axis"]; attrs: exclusive (start at 1), reverse (from the end)."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [cumulative(inputs[0], attrs, np.cumprod, 1)]

    @staticmethod
    def gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
        raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of cumprod is not supported (it divides by "
                                  "the input where that has zeros)")
