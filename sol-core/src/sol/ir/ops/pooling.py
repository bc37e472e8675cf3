"""Pooling ops over the spatial dims (2..) of an N,C,*spatial tensor (module DFP)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..graph import Dim, TensorType
from ..registry import op
from ._shapes import spatial_out
from .conv import _windows


def _pool_infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x = inputs[0]
    spatial = len(attrs["kernel"])
    dilation = attrs.get("dilation", (1,) * spatial)
    dims = list(x.dims[: x.rank - spatial])
    for i in range(spatial):
        d = x.dims[x.rank - spatial + i]
        p = attrs["padding"][i]
        size = spatial_out(d.size, attrs["kernel"][i], attrs["stride"][i], 2 * p, dilation[i], bool(attrs.get("ceil_mode", False)), p)
        dims.append(Dim(size, d.purpose))
    return [TensorType(tuple(dims), x.dtype)]


def _padded_windows(x: np.ndarray, attrs: dict[str, Any], fill: float) -> tuple[np.ndarray, tuple[int, ...], list[tuple[int, int]]]:
    """Pad (including the extra right padding ceil_mode needs) and return the window view (N, C, *out, *K)."""
    spatial = len(attrs["kernel"])
    lead = x.ndim - spatial
    dilation = tuple(attrs.get("dilation", (1,) * spatial))
    outs, pads = [], []
    for i in range(spatial):
        size, k, s, p = x.shape[lead + i], attrs["kernel"][i], attrs["stride"][i], attrs["padding"][i]
        out = int(spatial_out(size, k, s, 2 * p, dilation[i], bool(attrs.get("ceil_mode", False)), p))
        needed = (out - 1) * s + dilation[i] * (k - 1) + 1
        pads.append((p, max(p, needed - size - p)))
        outs.append(out)
    xp = np.pad(x, [(0, 0)] * lead + pads, constant_values=fill)
    # Fold leading dims into (N, C) so `_windows` (which assumes spatial from axis 2) applies to any rank.
    xp4 = xp.reshape((-1, 1) + xp.shape[lead:])
    win = _windows(xp4, attrs["kernel"], attrs["stride"], dilation)
    win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]
    return win.reshape(x.shape[:lead] + win.shape[2:]), tuple(outs), pads


@op("max_pool")
class MaxPool:
    """Max pooling. attrs: kernel, stride, padding (symmetric int per spatial dim), dilation, ceil_mode."""

    infer = staticmethod(_pool_infer)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        spatial = len(attrs["kernel"])
        win, _, _ = _padded_windows(x, attrs, -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min)
        return [win.max(axis=tuple(range(-spatial, 0))).astype(x.dtype, copy=False)]


@op("avg_pool")
class AvgPool:
    """Average pooling. attrs: kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor_override (None or int)."""

    infer = staticmethod(_pool_infer)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        spatial = len(attrs["kernel"])
        axes = tuple(range(-spatial, 0))
        win, _, pads = _padded_windows(x, attrs, 0.0)
        total = win.sum(axis=axes, dtype=np.float64)
        if attrs.get("divisor_override"):
            return [(total / attrs["divisor_override"]).astype(x.dtype)]
        # The divisor is the window sum of a mask: padded positions count only with count_include_pad,
        # the extra right padding of ceil_mode never counts (PyTorch's rule).
        sizes = x.shape[x.ndim - spatial:]
        mask = np.zeros(tuple(b + s + e for (b, e), s in zip(pads, sizes, strict=True)), dtype=np.float64)
        if attrs.get("count_include_pad", True):
            mask[tuple(slice(0, s + 2 * p) for s, p in zip(sizes, attrs["padding"], strict=True))] = 1.0
        else:
            mask[tuple(slice(p, p + s) for s, p in zip(sizes, attrs["padding"], strict=True))] = 1.0
        mwin = _windows(mask[None, None], attrs["kernel"], attrs["stride"], tuple(attrs.get("dilation", (1,) * spatial)))
        divisor = mwin.sum(axis=axes)[0, 0][tuple(slice(0, o) for o in total.shape[-spatial:])]
        return [(total / divisor).astype(x.dtype)]


def _adaptive(x: np.ndarray, output_size: Sequence[int | None], reduce: Callable[..., np.ndarray]) -> np.ndarray:
    """Adaptive pooling is separable (regions are products of per-axis ranges): reduce one axis at a time."""
    spatial = len(output_size)
    for i, out in enumerate(output_size):
        axis = x.ndim - spatial + i
        size = x.shape[axis]
        if out is None or out == size:
            continue
        parts = []
        for j in range(out):  # a loop over output positions of one axis, not over pixels
            start, end = (j * size) // out, -((-(j + 1) * size) // out)
            parts.append(reduce(np.take(x, range(start, end), axis=axis), axis=axis, keepdims=True))
        x = np.concatenate(parts, axis=axis)
    return x


def _adaptive_infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x = inputs[0]
    out = attrs["output_size"]
    lead = x.rank - len(out)
    dims = list(x.dims[:lead]) + [Dim(d.size if o is None else int(o), d.purpose) for d, o in zip(x.dims[lead:], out, strict=True)]
    return [TensorType(tuple(dims), x.dtype)]


@op("adaptive_avg_pool")
class AdaptiveAvgPool:
    """Adaptive average pooling to attrs["output_size"] (tuple per spatial dim; None keeps the size)."""

    infer = staticmethod(_adaptive_infer)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [_adaptive(x.astype(np.float64), attrs["output_size"], np.mean).astype(x.dtype)]


@op("adaptive_max_pool")
class AdaptiveMaxPool:
    """Adaptive max pooling to attrs["output_size"] (tuple per spatial dim; None keeps the size)."""

    infer = staticmethod(_adaptive_infer)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [_adaptive(inputs[0], attrs["output_size"], np.max)]
