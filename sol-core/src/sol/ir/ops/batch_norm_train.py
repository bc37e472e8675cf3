"""Batch norm in training mode (module DFP): normalise with the batch's own statistics.

``batch_norm_train`` also returns the statistics: the mean and 1/std
(biased variance) the backward needs, and the unbiased variance that
PyTorch folds into running_var. The running statistics themselves are
updated by ordinary elementwise layers the frontend adds after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph import Dim, Purpose, Tensor, TensorType
from ..registry import op


def _axes(ndim: int) -> tuple[int, ...]:
    return (0, *range(2, ndim))


def _channel_shape(ndim: int) -> tuple[int, ...]:
    return (1, -1) + (1,) * (ndim - 2)


def _stats_type(x: TensorType) -> TensorType:
    return TensorType((Dim(x.dims[1].size, Purpose.C),), x.dtype)


@op("batch_norm_train")
class BatchNormTrain:
    """inputs (x[N,C,*S], [weight], [bias]); attrs: eps -> (y, mean[C], invstd[C], unbiased var[C])."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        return [x, _stats_type(x), _stats_type(x), _stats_type(x)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        x64 = x.astype(np.float64)
        axes = _axes(x.ndim)
        count = x.size // x.shape[1]
        mean = x64.mean(axis=axes)
        var = ((x64 - mean.reshape(_channel_shape(x.ndim))) ** 2).mean(axis=axes)
        invstd = 1.0 / np.sqrt(var + attrs["eps"])
        y = (x64 - mean.reshape(_channel_shape(x.ndim))) * invstd.reshape(_channel_shape(x.ndim))
        if len(inputs) > 1 and inputs[1] is not None:
            y = y * inputs[1].reshape(_channel_shape(x.ndim))
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + inputs[2].reshape(_channel_shape(x.ndim))
        unbiased = var * count / max(count - 1, 1)
        return [y.astype(x.dtype), mean.astype(x.dtype), invstd.astype(x.dtype), unbiased.astype(x.dtype)]

    @staticmethod
    def gradient(layer: Any, grads: list[Tensor | None], b: Any) -> list[Tensor | None]:
        # only y is differentiable: the statistics feed the running-statistics buffers, which need no gradient
        dy = grads[0]
        if dy is None:
            return [None] * len(layer.inputs)
        weight = layer.inputs[1] if len(layer.inputs) > 1 else None
        inputs = [dy, b.fwd(layer.inputs[0]), b.fwd(layer.outputs[1]), b.fwd(layer.outputs[2])]
        dx, dw, db = b.layer("batch_norm_train_grad", inputs + ([b.fwd(weight)] if weight is not None else []), {})
        return [dx, dw, db][: len(layer.inputs)]


@op("batch_norm_train_grad")
class BatchNormTrainGrad:
    """inputs (dy, x, mean[C], invstd[C], [weight]) -> (dx, dweight[C], dbias[C]) of batch_norm_train's y."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[1]
        return [x, _stats_type(x), _stats_type(x)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        dy, x, mean, invstd = (a.astype(np.float64) for a in inputs[:4])
        shape = _channel_shape(x.ndim)
        axes = _axes(x.ndim)
        count = x.size // x.shape[1]
        xhat = (x - mean.reshape(shape)) * invstd.reshape(shape)
        dbias = dy.sum(axis=axes)
        dweight = (dy * xhat).sum(axis=axes)
        scale = invstd if len(inputs) < 5 else invstd * inputs[4].astype(np.float64)
        dx = scale.reshape(shape) / count * (count * dy - dbias.reshape(shape) - xhat * dweight.reshape(shape))
        dtype = inputs[0].dtype
        return [dx.astype(dtype), dweight.astype(dtype), dbias.astype(dtype)]
