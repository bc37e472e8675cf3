"""Max pooling that also returns where each maximum was (module DFP): ONNX MaxPool's Indices output.

Outputs (values, indices int64). An index is the flat position of the
maximum in the whole input (batch and channel included, ONNX's rule):
``(n * C + c) * H * W + h * W + w`` with attrs["storage_order"] 0 (row
major), ``... + h + w * H`` with 1 (column major, the spatial dims only).
The first maximum of a window wins. Padding is (begin, end) per spatial dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import SolUnsupportedError
from ..graph import Dim, Layer, Tensor, TensorType
from ..registry import op
from ._grad import GradBuilder
from ._shapes import spatial_out


def pads_of(attrs: dict[str, Any]) -> list[tuple[int, int]]:
    return [(int(p[0]), int(p[1])) if isinstance(p, (tuple, list)) else (int(p), int(p)) for p in attrs["padding"]]


def _window(attrs: dict[str, Any]) -> tuple[list[int], list[int], list[int], list[tuple[int, int]]]:
    kernel = [int(k) for k in attrs["kernel"]]
    r = len(kernel)
    stride = [int(s) for s in attrs.get("stride") or kernel]
    dilation = [int(d) for d in attrs.get("dilation") or [1] * r]
    return kernel, stride, dilation, pads_of(attrs)


def out_sizes(sizes: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    kernel, stride, dilation, pads = _window(attrs)
    return [spatial_out(s, k, st, b + e, d, bool(attrs.get("ceil_mode", False)), b)
            for s, k, st, d, (b, e) in zip(sizes, kernel, stride, dilation, pads, strict=True)]


@op("max_pool_indices")
class MaxPoolIndices:
    """Max pooling with the flat input index of each maximum: outputs (values, indices int64).

    attrs: kernel, stride, padding ((begin, end) or int per spatial dim), dilation, ceil_mode, storage_order.
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        r = len(attrs["kernel"])
        if x.rank != r + 2:
            raise SolUnsupportedError(f"max_pool_indices needs an N, C, *spatial input of rank {r + 2}, got {x.rank}")
        outs = out_sizes([d.size for d in x.dims[2:]], attrs)
        dims = tuple(x.dims[:2]) + tuple(Dim(o, d.purpose) for o, d in zip(outs, x.dims[2:], strict=True))
        return [TensorType(dims, x.dtype), TensorType(dims, "int64")]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        kernel, stride, dilation, pads = _window(attrs)
        r = len(kernel)
        sizes = x.shape[2:]
        outs = [int(o) for o in out_sizes(sizes, attrs)]
        column_major = int(attrs.get("storage_order", 0)) == 1
        flat_strides = ([int(np.prod(sizes[:d])) for d in range(r)] if column_major
                        else [int(np.prod(sizes[d + 1:])) for d in range(r)])
        plane = int(np.prod(sizes))
        values = np.empty(x.shape[:2] + tuple(outs), dtype=x.dtype)
        indices = np.empty(values.shape, dtype=np.int64)
        for n, c in np.ndindex(*x.shape[:2]):
            for o in np.ndindex(*outs):
                best, at = None, -1
                for tap in np.ndindex(*kernel):
                    h = [o[d] * stride[d] - pads[d][0] + tap[d] * dilation[d] for d in range(r)]
                    if any(h[d] < 0 or h[d] >= sizes[d] for d in range(r)):
                        continue
                    v = x[(n, c, *h)]
                    if best is None or v > best:
                        best, at = v, sum(h[d] * flat_strides[d] for d in range(r))
                values[(n, c, *o)] = best if best is not None else -np.inf
                indices[(n, c, *o)] = (n * x.shape[1] + c) * plane + at if at >= 0 else -1
        return [values, indices]

    @staticmethod
    def gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
        dy = grads[0]
        x = layer.inputs[0]
        if dy is None or not b.wants(x):
            return [None]
        pads = pads_of(layer.attrs)
        if any(p != q for p, q in pads):
            raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of max pooling with asymmetric padding "
                                      "is not supported")
        attrs = {"kernel": tuple(layer.attrs["kernel"]), "stride": tuple(layer.attrs["stride"]),
                 "padding": tuple(p for p, _ in pads), "dilation": tuple(layer.attrs.get("dilation") or (1,) * len(pads)),
                 "ceil_mode": bool(layer.attrs.get("ceil_mode", False)), "input_shape": x.shape}
        return [b.one("max_pool_grad", [dy, b.fwd(x)], attrs)]
