"""Scaled-dot-product attention (module DFP; codegen may lower it to two matmuls and a softmax)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph import TensorType
from ..registry import op


@op("attention")
class Attention:
    """softmax(q @ k^T * scale + mask) @ v over the last two dims: inputs (q[...,L,E], k[...,S,E], v[...,S,Ev], [mask]).

    attrs: scale (None means 1/sqrt(E)), is_causal (bool). A bool mask keeps
    the positions where it is true; a float mask is added to the scores.
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        q, v = inputs[0], inputs[2]
        return [TensorType(q.dims[:-1] + (v.dims[-1],), q.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        q, k, v = (a.astype(np.float64) for a in inputs[:3])
        scale = attrs.get("scale")
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
        length, source = scores.shape[-2:]
        if attrs.get("is_causal", False):
            scores = np.where(np.tril(np.ones((length, source), dtype=bool)), scores, -np.inf)
        if len(inputs) > 3 and inputs[3] is not None:
            mask = inputs[3]
            scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
        scores = scores - scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights = weights / weights.sum(axis=-1, keepdims=True)
        return [np.matmul(weights, v).astype(inputs[0].dtype)]
