"""Ops that fit no other family: embedding lookup, channel shuffle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import SolUnsupportedError
from ..graph import Dim, Layer, Purpose, Tensor, TensorType
from ..registry import op
from ._grad import GradBuilder, masked, zeros_like
from ._shapes import product


@op("embedding")
class Embedding:
    """weight[indices]: inputs (indices[...] integer, weight[V, E]) -> [..., E].

    attrs: padding_idx (optional: the row that gets no gradient, PyTorch's rule), scale_grad_by_freq (no
    gradient rule).
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        indices, weight = inputs
        return [TensorType(indices.dims + (Dim(weight.shape[1], Purpose.C),), weight.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        indices, weight = inputs
        return [weight[indices.astype(np.int64)]]

    @staticmethod
    def gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
        """dweight = zeros with each row of dy added to the row its index names (except padding_idx's)."""
        dy = grads[0]
        indices, weight = layer.inputs
        if dy is None or not b.wants(weight):
            return [None, None]
        if layer.attrs.get("scale_grad_by_freq", False):
            raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of an embedding with scale_grad_by_freq "
                                      "is not supported")
        count, width = product(indices.shape), weight.shape[1]
        dy = b.one("reshape", [dy], {"shape": (count, width)})
        idx = b.one("reshape", [b.fwd(indices)], {"shape": (count, 1)})
        padding = layer.attrs.get("padding_idx")
        if padding is not None:
            keep = b.one("ne", [idx, b.array(np.array(int(padding), dtype=indices.dtype))])
            dy = masked(b, keep, dy)
        idx = b.one("expand", [idx], {"shape": (count, width)})
        return [None, b.one("scatter_elements", [zeros_like(b, weight), idx, dy], {"axis": 0, "reduction": "add"})]


@op("channel_shuffle")
class ChannelShuffle:
    """ShuffleNet's channel shuffle over axis 1: view (N, g, C/g, ...), swap g and C/g, view back; attrs: groups."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        g = int(attrs["groups"])
        n, c = x.shape[:2]
        y = x.reshape((n, g, c // g) + x.shape[2:]).swapaxes(1, 2)
        return [np.ascontiguousarray(y).reshape(x.shape)]
