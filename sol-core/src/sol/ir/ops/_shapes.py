"""Shape arithmetic shared by the ops' shape rules.

Sizes are ints or sympy expressions in `BATCH`; every helper here works on
both so a shape rule is written once for static and wildcard-batch graphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

from ...errors import SolUnsupportedError
from ..graph import Dim, Purpose, Size, TensorType, as_size

_CATEGORY = {"bool": 0, "uint8": 1, "int8": 1, "int32": 1, "int64": 1,
             "float16": 2, "bfloat16": 2, "float32": 2, "float64": 2}


def floordiv(a: Size, b: Size) -> Size:
    """``a // b`` for ints and sympy sizes (Python's floor semantics)."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return as_size(sympy.floor(sympy.sympify(a) / b))


def ceildiv(a: Size, b: Size) -> Size:
    if isinstance(a, int) and isinstance(b, int):
        return -((-a) // b)
    return as_size(sympy.ceiling(sympy.sympify(a) / b))


def size_eq(a: Size, b: Size) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sympy.simplify(sympy.sympify(a) - b) == 0


def product(sizes: Sequence[Size]) -> Size:
    total: Any = 1
    for s in sizes:
        total = total * s
    return as_size(total)


def spatial_out(size: Size, kernel: int, stride: int, pad_total: int, dilation: int, ceil_mode: bool = False,
                pad_begin: int | None = None) -> Size:
    """Output length of a sliding window (conv / pool), PyTorch's formula including ceil_mode.

    With ceil_mode the last window must start inside the input or the left
    padding (PyTorch drops a window that would start in the right padding).
    """
    span = as_size(size + pad_total - dilation * (kernel - 1) - 1)
    out = as_size((ceildiv(span, stride) if ceil_mode else floordiv(span, stride)) + 1)
    if ceil_mode:
        begin = pad_total // 2 if pad_begin is None else pad_begin
        last_start = as_size((out - 1) * stride)
        limit = as_size(size + begin)
        if isinstance(last_start, int) and isinstance(limit, int):
            if last_start >= limit:
                out -= 1
        else:
            out = as_size(sympy.Piecewise((out - 1, sympy.Ge(last_start, limit)), (out, True)))
    return out


def promote(operands: Sequence[tuple[str, int]]) -> str:
    """PyTorch's type promotion of (dtype, rank) operands.

    The highest category (bool < int < float) wins; within it, dimensioned
    tensors beat 0-d ones, so a 0-d const made from a Python scalar does not
    widen a float32 tensor.
    """
    best_cat = max(_CATEGORY[d] for d, _ in operands)
    ranked = [(d, r) for d, r in operands if _CATEGORY[d] == best_cat]
    dimensioned = [(d, r) for d, r in ranked if r > 0] or ranked
    if all(d == dimensioned[0][0] for d, _ in dimensioned):
        return dimensioned[0][0]
    return str(np.result_type(*[np.dtype(d) if d != "bfloat16" else np.float32 for d, _ in dimensioned]))


def result_dtype(types: Sequence[TensorType]) -> str:
    return promote([(t.dtype, t.rank) for t in types])


def result_dtype_np(arrays: Sequence[np.ndarray]) -> str:
    return promote([(str(a.dtype), a.ndim) for a in arrays])


def broadcast(types: Sequence[TensorType]) -> tuple[Dim, ...]:
    """numpy broadcasting of dims; a dim's purpose comes from the operand whose size is not 1."""
    rank = max(t.rank for t in types)
    out: list[Dim] = []
    for axis in range(rank):
        chosen: Dim | None = None
        for t in types:
            offset = axis - (rank - t.rank)
            if offset < 0:
                continue
            d = t.dims[offset]
            if chosen is None or (chosen.size == 1 and d.size != 1):
                chosen = d
            elif d.size != 1 and isinstance(d.size, int) and isinstance(chosen.size, int) and d.size != chosen.size:
                raise SolUnsupportedError(f"shapes {[list(x.shape) for x in types]} cannot be broadcast together")
        assert chosen is not None
        out.append(chosen)
    return tuple(out)


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise SolUnsupportedError(f"axis {axis} is out of range for a tensor of rank {rank}")
    return axis % max(rank, 1)


def with_sizes(dims: Sequence[Dim], sizes: Sequence[Size]) -> tuple[Dim, ...]:
    return tuple(Dim(as_size(s), d.purpose) for d, s in zip(dims, sizes, strict=True))


def guess_purposes(rank: int) -> tuple[Purpose, ...]:
    """Purposes for a tensor whose layout is unknown: NC then pixels (NCHW convention)."""
    if rank == 0:
        return ()
    if rank == 1:
        return (Purpose.C,)
    return (Purpose.N, Purpose.C) + (Purpose.P,) * (rank - 2)


def reshape_dims(src: Sequence[Dim], shape: Sequence[Size]) -> tuple[Dim, ...]:
    """Dims for a reshape: keep purposes where the leading sizes line up, else fall back to a guess."""
    shape = [as_size(s) for s in shape]
    out: list[Dim] = []
    guess = guess_purposes(len(shape))
    for i, s in enumerate(shape):
        if i < len(src) and size_eq(src[i].size, s) and all(size_eq(src[j].size, shape[j]) for j in range(i)):
            out.append(Dim(s, src[i].purpose))
        elif i == 0 and src and src[0].purpose is Purpose.N and not isinstance(s, int):
            out.append(Dim(s, Purpose.N))
        else:
            out.append(Dim(s, guess[i] if not (i == 0 and len(shape) > 1) else Purpose.N))
    return tuple(out)
