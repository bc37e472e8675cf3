"""Normalization ops in their inference form (module DFP)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph import TensorType
from ..registry import op


def _optional(inputs: Sequence[np.ndarray | None], index: int) -> np.ndarray | None:
    return inputs[index] if len(inputs) > index else None


@op("batch_norm")
class BatchNorm:
    """Inference batch norm over channel axis 1: inputs (x, running_mean, running_var, [weight], [bias]); attrs: eps."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x, mean, var = inputs[0], inputs[1], inputs[2]
        shape = (1, -1) + (1,) * (x.ndim - 2)
        scale = 1.0 / np.sqrt(var.astype(np.float64) + attrs["eps"])
        weight, bias = _optional(inputs, 3), _optional(inputs, 4)
        if weight is not None:
            scale = scale * weight
        y = (x - mean.reshape(shape)) * scale.reshape(shape)
        if bias is not None:
            y = y + bias.reshape(shape)
        return [y.astype(x.dtype)]


@op("layer_norm")
class LayerNorm:
    """Layer norm over the last attrs["normalized_ndim"] dims: inputs (x, [weight], [bias]); attrs: eps."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axes = tuple(range(x.ndim - int(attrs["normalized_ndim"]), x.ndim))
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=axes, keepdims=True)
        var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
        y = (x64 - mean) / np.sqrt(var + attrs["eps"])
        weight, bias = _optional(inputs, 1), _optional(inputs, 2)
        if weight is not None:
            y = y * weight
        if bias is not None:
            y = y + bias
        return [y.astype(x.dtype)]


@op("group_norm")
class GroupNorm:
    """Group norm over channel axis 1: inputs (x, [weight], [bias]); attrs: num_groups, eps."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        n, c = x.shape[:2]
        g = int(attrs["num_groups"])
        xg = x.astype(np.float64).reshape(n, g, -1)
        mean = xg.mean(axis=2, keepdims=True)
        var = ((xg - mean) ** 2).mean(axis=2, keepdims=True)
        y = ((xg - mean) / np.sqrt(var + attrs["eps"])).reshape(x.shape)
        shape = (1, c) + (1,) * (x.ndim - 2)
        weight, bias = _optional(inputs, 1), _optional(inputs, 2)
        if weight is not None:
            y = y * weight.reshape(shape)
        if bias is not None:
            y = y + bias.reshape(shape)
        return [y.astype(x.dtype)]
