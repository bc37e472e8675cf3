"""Dropout in training (module DFP): a mask from SOL's counter-based RNG (Philox-4x32-10).

inputs (x, key): key is an int64[2] tensor (seed, step counter) the
frontend passes per call; attrs: p, stream (unique per dropout layer of a
model, so two layers never share a mask), per_channel (Dropout2d/3d: one
draw per (n, c)), unscaled (keep x as it is instead of x / (1 - p): the
draws of ``bernoulli_``, applied to ones, as stochastic depth uses them). Draw i (the row-major index of an element, or of its
(n, c) plane) is word i % 4 of Philox(counter=(i // 4, step, stream),
key=seed): one Philox call yields four draws, so generated code computes a
quarter of the rounds a one-word stream would need. Element i keeps its
value (scaled by 1/(1-p)) when the top 24 bits of its draw are >= p * 2^24.
The mask is a pure function of (seed, step, stream, i), so the backward
recomputes it instead of saving it: the gradient is the same op on dy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph import Tensor, TensorType
from ..registry import op

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
MASK32 = 0xFFFFFFFF


def threshold(p: float) -> int:
    """Keep an element when its 24-bit draw is >= this (exact integer compare in numpy and in C)."""
    return min(int(math.ceil(float(p) * (1 << 24))), 1 << 24)


def philox(seed: int, step: int, stream: int, counter: np.ndarray) -> tuple[np.ndarray, ...]:
    """The four 32-bit words of Philox-4x32-10 for each counter (uint64 arrays hold 32-bit lanes)."""
    seed &= (1 << 64) - 1
    c0 = counter.astype(np.uint64) & MASK32
    c1 = (counter.astype(np.uint64) >> np.uint64(32)) & MASK32
    c2 = np.full_like(c0, step & MASK32)
    c3 = np.full_like(c0, stream & MASK32)
    k0, k1 = seed & MASK32, (seed >> 32) & MASK32
    for _ in range(10):
        p0 = c0 * np.uint64(PHILOX_M[0])
        p1 = c2 * np.uint64(PHILOX_M[1])
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & MASK32,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & MASK32)
        k0, k1 = (k0 + PHILOX_W[0]) & MASK32, (k1 + PHILOX_W[1]) & MASK32
    return c0, c1, c2, c3


def draws(seed: int, step: int, stream: int, index: np.ndarray) -> np.ndarray:
    """The 32-bit draw of each index: word ``index % 4`` of Philox at counter ``index // 4``."""
    index = index.astype(np.uint64)
    words = philox(seed, step, stream, index >> np.uint64(2))
    return np.choose((index & np.uint64(3)).astype(np.intp), words)


def keep_mask(shape: tuple[int, ...], key: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    draws_shape = shape[:2] + (1,) * (len(shape) - 2) if attrs.get("per_channel", False) else shape
    index = np.arange(int(np.prod(draws_shape)), dtype=np.uint64).reshape(draws_shape)
    seed, step = (int(v) & ((1 << 64) - 1) for v in np.asarray(key).reshape(-1)[:2])
    bits = draws(seed, step, int(attrs["stream"]), index) >> np.uint64(8)
    return np.broadcast_to(bits >= np.uint64(threshold(attrs["p"])), shape)


def scale_factor(attrs: dict[str, Any]) -> float:
    """What a kept element is multiplied with: 1 / (1 - p), or 1 for an unscaled mask."""
    p = float(attrs["p"])
    if attrs.get("unscaled", False):
        return 1.0
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


@op("dropout_train")
class DropoutTrain:
    """x * mask / (1 - p) with a reproducible mask: inputs (x, key int64[2]); attrs: p, stream, per_channel, unscaled."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x, key = inputs
        mask = keep_mask(x.shape, key, attrs)
        kept = x * np.asarray(scale_factor(attrs), dtype=x.dtype)
        return [np.where(mask, kept, np.zeros((), x.dtype)).astype(x.dtype)]

    @staticmethod
    def gradient(layer: Any, grads: list[Tensor | None], b: Any) -> list[Tensor | None]:
        dy = grads[0]
        if dy is None:
            return [None, None]
        return [b.one("dropout_train", [dy, b.fwd(layer.inputs[1])], dict(layer.attrs)), None]
