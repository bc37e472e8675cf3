"""Reductions and softmax (module DFP)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph import Dim, TensorType
from ..registry import op
from ._shapes import normalize_axis


def _reduce_infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x = inputs[0]
    axes = {normalize_axis(a, x.rank) for a in attrs["axes"]}
    if attrs.get("keepdims", False):
        dims = tuple(Dim(1, d.purpose) if i in axes else d for i, d in enumerate(x.dims))
    else:
        dims = tuple(d for i, d in enumerate(x.dims) if i not in axes)
    return [TensorType(dims, x.dtype)]


def _register_reduce(name: str, fn: Any, doc: str) -> None:
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axes = tuple(normalize_axis(a, x.ndim) for a in attrs["axes"])
        acc = x.astype(np.float64) if x.dtype.kind == "f" and name != "reduce_max" else x
        return [np.asarray(fn(acc, axis=axes, keepdims=bool(attrs.get("keepdims", False))), dtype=x.dtype)]

    cls = type(name, (), {"__doc__": f"{doc} over attrs['axes'] (tuple); attrs: keepdims.",
                          "infer": staticmethod(_reduce_infer), "reference": staticmethod(reference)})
    op(name)(cls)


_register_reduce("reduce_mean", np.mean, "Mean")
_register_reduce("reduce_sum", np.sum, "Sum")
_register_reduce("reduce_max", np.max, "Maximum")


@op("softmax")
class Softmax:
    """Softmax along attrs["axis"]."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        e = np.exp(x.astype(np.float64) - x.max(axis=attrs["axis"], keepdims=True))
        return [(e / e.sum(axis=attrs["axis"], keepdims=True)).astype(x.dtype)]


@op("log_softmax")
class LogSoftmax:
    """log(softmax(x)) along attrs["axis"], computed stably."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0].astype(np.float64)
        shifted = x - x.max(axis=attrs["axis"], keepdims=True)
        return [(shifted - np.log(np.exp(shifted).sum(axis=attrs["axis"], keepdims=True))).astype(inputs[0].dtype)]
