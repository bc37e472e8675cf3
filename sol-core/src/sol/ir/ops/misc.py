"""Ops that fit no other family: embedding lookup, channel shuffle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph import Dim, Purpose, TensorType
from ..registry import op


@op("embedding")
class Embedding:
    """weight[indices]: inputs (indices[...] integer, weight[V, E]) -> [..., E]."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        indices, weight = inputs
        return [TensorType(indices.dims + (Dim(weight.shape[1], Purpose.C),), weight.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        indices, weight = inputs
        return [weight[indices.astype(np.int64)]]


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
