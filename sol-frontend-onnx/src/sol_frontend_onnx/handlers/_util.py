"""Helpers shared by the handlers: axes, reshapes and casts written once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sol.ir import Size, Tensor, as_size
from sol.ir.ops import product


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def reshape(ctx: Any, x: Tensor, shape: Sequence[Size]) -> Tensor:
    shape = tuple(as_size(s) for s in shape)
    if tuple(x.shape) == shape:
        return x
    return ctx.one("reshape", [x], {"shape": shape})


def cast(ctx: Any, x: Tensor, dtype: str) -> Tensor:
    return x if x.dtype == dtype else ctx.one("cast", [x], {"dtype": dtype})


def scalar(ctx: Any, value: Any, like: Tensor) -> Tensor:
    """A 0-d constant of ``like``'s dtype (so arithmetic with it keeps that dtype)."""
    return ctx.const(np.asarray(value, dtype=like.dtype if like.dtype != "bool" else None))


def flatten_2d(ctx: Any, x: Tensor, axis: int) -> Tensor:
    """[prod(shape[:axis]), prod(shape[axis:])]: the coercion of ONNX's opset < 13 softmax family."""
    axis = norm_axis(axis, x.rank)
    return reshape(ctx, x, (product(x.shape[:axis]), product(x.shape[axis:])))


def unsqueeze(ctx: Any, x: Tensor, axes: Sequence[int]) -> Tensor:
    rank = x.rank + len(axes)
    axes = sorted(norm_axis(a, rank) for a in axes)
    shape: list[Size] = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(ctx, x, shape)
