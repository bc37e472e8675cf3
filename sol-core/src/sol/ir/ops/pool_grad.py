"""Gradients of the pooling ops (module DFP): dy (and x where the window's maximum matters) -> dx.

The input's shape is not recoverable from dy alone, so every op carries it
in attrs["input_shape"] (sizes, BATCH expressions allowed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph import Dim, TensorType, as_size
from ..registry import op
from .pooling import AvgPool, _padded_windows


def _input_like(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    dy = inputs[0]
    shape = attrs["input_shape"]
    dims = tuple(Dim(as_size(s), d.purpose) for s, d in zip(shape, dy.dims, strict=True))
    return [TensorType(dims, dy.dtype)]


def _scatter_taps(dy: np.ndarray, weights_per_tap: Any, attrs: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    """Add ``dy * weight(tap)`` to every input position of every window; crop the padding."""
    kernel = tuple(int(k) for k in attrs["kernel"])
    spatial = len(kernel)
    lead = dy.ndim - spatial
    stride = tuple(int(s) for s in attrs["stride"])
    dilation = tuple(attrs.get("dilation", (1,) * spatial))
    _, outs, pads = _padded_windows(np.zeros(shape), attrs, 0.0)
    padded = np.zeros(shape[:lead] + tuple(b + s + e for (b, e), s in zip(pads, shape[lead:], strict=True)))
    for tap in np.ndindex(*kernel):
        index = tuple(slice(k * d, k * d + (o - 1) * s + 1, s) for k, d, o, s in zip(tap, dilation, outs, stride, strict=True))
        padded[(Ellipsis, *index)] += dy * weights_per_tap(tap)
    crop = tuple(slice(b, b + s) for (b, _), s in zip(pads, shape[lead:], strict=True))
    return padded[(Ellipsis, *crop)]


@op("max_pool_grad")
class MaxPoolGrad:
    """dx of max_pool: inputs (dy, x); the gradient goes to the first maximum of each window (PyTorch's rule)."""

    infer = staticmethod(_input_like)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        dy, x = inputs
        kernel = tuple(int(k) for k in attrs["kernel"])
        spatial = len(kernel)
        win, _, _ = _padded_windows(x, attrs, -np.inf)
        flat = win.reshape(win.shape[:-spatial] + (-1,))
        first = np.argmax(flat, axis=-1)  # numpy's argmax is the first maximum, as in PyTorch
        taps = list(np.ndindex(*kernel))
        dx = _scatter_taps(dy.astype(np.float64), lambda tap: first == taps.index(tap), attrs, x.shape)
        return [dx.astype(dy.dtype)]


@op("avg_pool_grad")
class AvgPoolGrad:
    """dx of avg_pool: inputs (dy); attrs: those of the avg_pool and input_shape."""

    infer = staticmethod(_input_like)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        dy = inputs[0]
        shape = tuple(int(s) for s in attrs["input_shape"])
        if attrs.get("divisor_override"):
            divisor = np.full(dy.shape, float(attrs["divisor_override"]))
        else:
            # the divisor per window: (window sum of ones) / (average of ones), both by the forward's own rules
            ones = np.ones(shape)
            spatial = len(attrs["kernel"])
            sums = _padded_windows(ones, attrs, 0.0)[0].sum(axis=tuple(range(-spatial, 0)))
            divisor = sums / AvgPool.reference([ones], attrs)[0]
        dx = _scatter_taps(dy.astype(np.float64) / divisor, lambda tap: 1.0, attrs, shape)
        return [dx.astype(dy.dtype)]


def _regions(size: int, out: int) -> list[tuple[int, int]]:
    return [((j * size) // out, -((-(j + 1) * size) // out)) for j in range(out)]


def _adaptive_grad(dy: np.ndarray, x: np.ndarray | None, shape: tuple[int, ...], output_size: Sequence[int | None]) -> np.ndarray:
    spatial = len(output_size)
    lead = len(shape) - spatial
    outs = [shape[lead + i] if o is None else int(o) for i, o in enumerate(output_size)]
    dx = np.zeros(shape)
    for pos in np.ndindex(*outs):  # a loop over output positions, not over pixels
        region = tuple(slice(*_regions(shape[lead + i], outs[i])[p]) for i, p in enumerate(pos))
        g = dy[(Ellipsis, *pos)].astype(np.float64)
        if x is None:
            area = int(np.prod([s.stop - s.start for s in region]))
            dx[(Ellipsis, *region)] += (g / area)[(Ellipsis,) + (None,) * spatial]
        else:
            block = x[(Ellipsis, *region)]
            flat = block.reshape(block.shape[:lead] + (-1,))
            first = np.argmax(flat, axis=-1)
            mask = np.zeros(flat.shape)
            np.put_along_axis(mask, first[..., None], 1.0, axis=-1)
            dx[(Ellipsis, *region)] += mask.reshape(block.shape) * g[(Ellipsis,) + (None,) * spatial]
    return dx


@op("adaptive_avg_pool_grad")
class AdaptiveAvgPoolGrad:
    """dx of adaptive_avg_pool: inputs (dy); attrs: output_size, input_shape."""

    infer = staticmethod(_input_like)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        shape = tuple(int(s) for s in attrs["input_shape"])
        return [_adaptive_grad(inputs[0], None, shape, attrs["output_size"]).astype(inputs[0].dtype)]


@op("adaptive_max_pool_grad")
class AdaptiveMaxPoolGrad:
    """dx of adaptive_max_pool: inputs (dy, x); the first maximum of each region gets the gradient."""

    infer = staticmethod(_input_like)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        dy, x = inputs
        return [_adaptive_grad(dy, x, x.shape, attrs["output_size"]).astype(dy.dtype)]
