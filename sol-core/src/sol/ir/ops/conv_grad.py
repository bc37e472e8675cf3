"""Weight gradients of convolutions and linear layers (module DFP; a DNN library may run them).

The input gradients are ordinary ops: a `conv_transpose` for a conv, a `matmul`
for a linear layer (both marked so a library can run them as backward-data).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph import Dim, Purpose, TensorType
from ..registry import op
from .conv import _windows


@op("conv_grad_weight")
class ConvGradWeight:
    """dL/dw of ``conv(x, w)``: inputs (x[N,C,*S], dy[N,O,*Y]) -> dw[O, C/groups, *K].

    attrs: those of the conv (stride, padding as (begin, end) pairs, dilation, groups) and kernel (tuple).
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x, dy = inputs
        groups = int(attrs["groups"])
        dims = (Dim(dy.shape[1], Purpose.C), Dim(x.shape[1] // groups if isinstance(x.shape[1], int) else x.shape[1], Purpose.C))
        dims += tuple(Dim(int(k), Purpose.P) for k in attrs["kernel"])
        return [TensorType(dims, dy.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x, dy = inputs
        groups = int(attrs["groups"])
        kernel = tuple(int(k) for k in attrs["kernel"])
        spatial = len(kernel)
        xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [tuple(p) for p in attrs["padding"]])
        win = _windows(xp, kernel, attrs["stride"], attrs["dilation"])  # (N, C, *out, *K)
        out_sizes = dy.shape[2:]
        win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in out_sizes)]
        n, c = x.shape[:2]
        o = dy.shape[1]
        cols = win.reshape((n, groups, c // groups) + tuple(out_sizes) + kernel)
        grads = dy.astype(np.float64).reshape((n, groups, o // groups) + tuple(out_sizes))
        letters = "abcdefgh"[:spatial]
        ks = "pqrs"[:spatial]
        dw = np.einsum(f"ngc{letters}{ks},ngo{letters}->goc{ks}", cols, grads)
        return [dw.reshape((o, c // groups) + kernel).astype(dy.dtype)]


@op("linear_grad_weight")
class LinearGradWeight:
    """dL/dw of ``linear(x, w)``: inputs (x[..., I], dy[..., O]) -> dw[O, I], summed over every leading (row) dim.

    One op rather than ``matmul(permute(dy), x)``: a library computes it from dy and x as they lie
    (oneDNN's inner-product backward-weights), without materializing the transpose.
    """

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x, dy = inputs
        return [TensorType((Dim(dy.shape[-1], Purpose.C), Dim(x.shape[-1], Purpose.C)), dy.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x, dy = inputs
        rows_x = x.reshape(-1, x.shape[-1]).astype(np.float64)
        rows_dy = dy.reshape(-1, dy.shape[-1]).astype(np.float64)
        return [(rows_dy.T @ rows_x).astype(dy.dtype)]
