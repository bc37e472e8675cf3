"""Library-call ops (module DNN): convolutions, linear layers, matrix products."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...errors import SolUnsupportedError
from ..graph import Dim, Purpose, TensorType, as_size
from ..registry import op
from ._shapes import broadcast, result_dtype, spatial_out


def _windows(x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> np.ndarray:
    """View of all windows of the spatial axes (2..): shape (N, C, *out, *kernel); no copy."""
    spatial = len(kernel)
    axes = tuple(range(2, 2 + spatial))
    extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True))
    view = sliding_window_view(x, extent, axis=axes)
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride) + tuple(slice(None, None, d) for d in dilation)
    return view[index]


@op("conv", module="DNN")
class Conv:
    """Convolution over 1-3 spatial dims: inputs (x[N,C,*S], w[O,C/groups,*K], [bias[O]]).

    attrs: stride (tuple), padding (tuple of (begin, end) per spatial dim),
    dilation (tuple), groups (int).
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x, w = inputs[0], inputs[1]
        spatial = x.rank - 2
        if not 1 <= spatial <= 3:
            raise SolUnsupportedError(f"conv over {spatial} spatial dims is not supported (1-3 are)")
        out = [x.dims[0], Dim(w.shape[0], Purpose.C)]
        for i in range(spatial):
            begin, end = attrs["padding"][i]
            size = spatial_out(x.dims[2 + i].size, int(w.shape[2 + i]), attrs["stride"][i], begin + end, attrs["dilation"][i])
            out.append(Dim(size, x.dims[2 + i].purpose))
        return [TensorType(tuple(out), x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x, w = inputs[0], inputs[1]
        groups = int(attrs["groups"])
        spatial = x.ndim - 2
        x = np.pad(x, [(0, 0), (0, 0)] + [tuple(p) for p in attrs["padding"]])
        kernel = w.shape[2:]
        win = _windows(x, kernel, attrs["stride"], attrs["dilation"])  # (N, C, *out, *K)
        n, c = x.shape[:2]
        out_sizes = win.shape[2:2 + spatial]
        out_ch = w.shape[0]
        # im2col per group: (N, g, Cg*K, X) so one batched matmul does every group.
        perm = (0, 1) + tuple(range(2 + spatial, 2 + 2 * spatial)) + tuple(range(2, 2 + spatial))
        cols = np.ascontiguousarray(win.transpose(perm)).reshape(n, groups, (c // groups) * int(np.prod(kernel)), -1)
        wmat = w.reshape(groups, out_ch // groups, -1)
        y = np.matmul(wmat[None], cols).reshape((n, out_ch) + tuple(out_sizes))
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + inputs[2].reshape((1, -1) + (1,) * spatial)
        return [y.astype(inputs[0].dtype, copy=False)]


@op("conv_transpose", module="DNN")
class ConvTranspose:
    """Transposed convolution: inputs (x[N,Cin,*S], w[Cin,Cout/groups,*K], [bias[Cout]]).

    attrs: stride, padding (symmetric int per spatial dim), output_padding, dilation, groups.
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x, w = inputs[0], inputs[1]
        groups = int(attrs["groups"])
        out = [x.dims[0], Dim(as_size(w.shape[1] * groups), Purpose.C)]
        for i in range(x.rank - 2):
            k = int(w.shape[2 + i])
            size = as_size((x.dims[2 + i].size - 1) * attrs["stride"][i] - 2 * attrs["padding"][i]
                           + attrs["dilation"][i] * (k - 1) + attrs["output_padding"][i] + 1)
            out.append(Dim(size, x.dims[2 + i].purpose))
        return [TensorType(tuple(out), x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x, w = inputs[0], inputs[1]
        groups = int(attrs["groups"])
        n, cin = x.shape[:2]
        spatial = x.ndim - 2
        in_sizes = x.shape[2:]
        kernel = w.shape[2:]
        og = w.shape[1]
        stride, dil, pad, opad = attrs["stride"], attrs["dilation"], attrs["padding"], attrs["output_padding"]
        full = [(s - 1) * st + d * (k - 1) + 1 + op_ for s, st, d, k, op_ in zip(in_sizes, stride, dil, kernel, opad, strict=True)]
        y = np.zeros((n, groups, og) + tuple(full), dtype=np.float64 if x.dtype == np.float64 else np.float32)
        xg = x.reshape(n, groups, cin // groups, -1)  # (N, g, Cg, X)
        wg = w.reshape(groups, cin // groups, og, -1)  # (g, Cg, Og, K)
        # Scatter one kernel tap at a time (a loop over taps, never over pixels).
        for tap, kidx in enumerate(np.ndindex(*kernel)):
            contrib = np.matmul(wg[:, :, :, tap].transpose(0, 2, 1)[None], xg).reshape((n, groups, og) + tuple(in_sizes))
            index = tuple(slice(k * d, k * d + (s - 1) * st + 1, st) for k, d, s, st in zip(kidx, dil, in_sizes, stride, strict=True))
            y[(slice(None),) * 3 + index] += contrib
        crop = tuple(slice(p, f - p) for p, f in zip(pad, full, strict=True))
        y = y[(slice(None),) * 3 + crop].reshape((n, groups * og) + tuple(f - 2 * p for p, f in zip(pad, full, strict=True)))
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + inputs[2].reshape((1, -1) + (1,) * spatial)
        return [np.ascontiguousarray(y, dtype=x.dtype)]


@op("linear", module="DNN")
class Linear:
    """y = x @ w.T + bias over the last dim: inputs (x[..., K], w[O, K], [bias[O]])."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x, w = inputs[0], inputs[1]
        last = Dim(w.shape[0], x.dims[-1].purpose if x.rank > 0 else Purpose.C)
        return [TensorType(x.dims[:-1] + (last,), x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        y = np.matmul(inputs[0], inputs[1].T)
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + inputs[2]
        return [y.astype(inputs[0].dtype, copy=False)]


@op("matmul", module="DNN")
class MatMul:
    """numpy matmul with broadcasting of the batch dims (covers bmm, mm, mv): inputs (a, b).

    attrs: transpose_b (bool, default False) multiplies by b with its last two dims swapped, read where it
    lies (attention's q @ k^T, as lowered for a library in sol.codegen.lowering).
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        a, b = inputs
        if a.rank == 0 or b.rank == 0:
            raise SolUnsupportedError("matmul of a 0-d tensor; use mul")
        if attrs.get("transpose_b"):
            if b.rank < 2:
                raise SolUnsupportedError("matmul with transpose_b needs a matrix b (rank >= 2)")
            b = TensorType(b.dims[:-2] + (b.dims[-1], b.dims[-2]), b.dtype)
        dtype = result_dtype(inputs)
        if a.rank == 1 and b.rank == 1:
            return [TensorType((), dtype)]
        if a.rank == 1:
            return [TensorType(b.dims[:-2] + (b.dims[-1],), dtype)]
        if b.rank == 1:
            return [TensorType(a.dims[:-1], dtype)]
        batch = broadcast([TensorType(a.dims[:-2]), TensorType(b.dims[:-2])]) if a.rank > 2 or b.rank > 2 else ()
        return [TensorType(tuple(batch) + (a.dims[-2], b.dims[-1]), dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        a, b = inputs
        if attrs.get("transpose_b"):
            b = np.swapaxes(b, -1, -2)
        dtype = np.result_type(a.dtype, b.dtype)
        return [np.asarray(np.matmul(a, b), dtype=dtype)]
