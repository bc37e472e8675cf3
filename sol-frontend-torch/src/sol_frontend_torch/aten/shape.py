"""Data-movement aten ops: views, permutes, slicing, concatenation, splitting, padding, reductions, copies.

View-like ops take their result shape from torch's own shape metadata
(`Context.meta_shape`), so -1 entries, squeezes and flattens need no
re-derivation and stay correct for a wildcard batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy
import torch
from sol.errors import SolUnsupportedError
from sol.ir import Size, Tensor, as_size

from ._registry import Context, aten, axis
from .nn import _filled

_TO_END = 2 ** 62  # PyTorch writes "to the end" as INT64_MAX


def _same_shape(a: tuple[Size, ...], b: tuple[Size, ...]) -> bool:
    return len(a) == len(b) and all(as_size(x - y) == 0 for x, y in zip(a, b, strict=True))


def _reshape_to_meta(cx: Context, x: Tensor) -> Tensor:
    shape = cx.meta_shape()
    return x if _same_shape(shape, x.shape) else cx.one("reshape", [x], {"shape": shape})


@aten("view", "reshape", "_unsafe_view", "flatten", "unflatten", "unsqueeze", "squeeze", "view_as", "reshape_as",
      "_reshape_alias", "squeeze_copy", "view_copy")
def reshape(cx: Context, x: Tensor, *_: Any, **__: Any) -> Tensor:
    return _reshape_to_meta(cx, x)


@aten("contiguous", "clone", "alias", "detach", "lift_fresh_copy", "lift_fresh", "_to_copy", "to", "type_as")
def copy(cx: Context, x: Any, *_: Any, **__: Any) -> Any:
    # Values, not memory: a copy is the same value. A dtype change is inserted by the converter's metadata check.
    return x


@aten("permute")
def permute(cx: Context, x: Tensor, dims: list[int]) -> Tensor:
    perm = tuple(axis(d, x.rank) for d in dims)
    return x if perm == tuple(range(x.rank)) else cx.one("permute", [x], {"perm": perm})


@aten("transpose", "swapaxes", "swapdims")
def transpose(cx: Context, x: Tensor, dim0: int, dim1: int) -> Tensor:
    perm = list(range(x.rank))
    a, b = axis(dim0, x.rank), axis(dim1, x.rank)
    perm[a], perm[b] = perm[b], perm[a]
    return permute(cx, x, perm)


@aten("t", "numpy_T")
def t(cx: Context, x: Tensor) -> Tensor:
    return permute(cx, x, list(reversed(range(x.rank))))


def _clamp_index(value: Any, size: Size, default: Size) -> Size:
    if value is None:
        return default
    if isinstance(value, int) and value >= _TO_END:
        return size
    if isinstance(value, int) and value < 0:
        value = as_size(size + value)
        return max(value, 0) if isinstance(value, int) else value
    if isinstance(value, int) and isinstance(size, int):
        return min(value, size)
    return as_size(value)


@aten("slice")
def slice_(cx: Context, x: Tensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Tensor:
    d = axis(dim, x.rank)
    size = x.shape[d]
    begin, stop = _clamp_index(start, size, 0), _clamp_index(end, size, size)
    if isinstance(begin, int) and isinstance(stop, int) and stop < begin:
        stop = begin
    if begin == 0 and as_size(stop - size) == 0 and step == 1:
        return x
    return cx.one("slice", [x], {"axis": d, "start": begin, "stop": stop, "step": int(step)})


@aten("select")
def select(cx: Context, x: Tensor, dim: int, index: int) -> Tensor:
    d = axis(dim, x.rank)
    size = x.shape[d]
    i = as_size(size + index) if index < 0 else index
    piece = cx.one("slice", [x], {"axis": d, "start": i, "stop": as_size(i + 1), "step": 1})
    return _reshape_to_meta(cx, piece)


@aten("expand", "expand_as", "broadcast_to", "expand_copy")
def expand(cx: Context, x: Tensor, *_: Any, **__: Any) -> Tensor:
    shape = cx.meta_shape()
    return x if _same_shape(shape, x.shape) else cx.one("expand", [x], {"shape": shape})


@aten("cat", "concat", "concatenate")
def cat(cx: Context, tensors: list[Tensor], dim: int = 0) -> Tensor:
    # torch.cat skips 1-d empty tensors (a legacy rule); so do we.
    parts = [t for t in tensors if not (t.rank == 1 and t.shape[0] == 0)]
    if len(parts) == 1:
        return parts[0]
    return cx.one("concat", parts, {"axis": axis(dim, parts[0].rank)})


def _split(cx: Context, x: Tensor, sizes: list[int], dim: int) -> list[Tensor]:
    d = axis(dim, x.rank)
    if len(sizes) == 1:
        return [x]
    return cx.layer("split", [x], {"axis": d, "sizes": tuple(int(s) for s in sizes)})


def _static(size: Size, what: str) -> int:
    if not isinstance(size, int):
        raise SolUnsupportedError(f"{what} along the wildcard batch dimension is not supported")
    return size


@aten("split", "split_with_sizes", "split_copy", "split_with_sizes_copy")
def split(cx: Context, x: Tensor, split_size: Any, dim: int = 0) -> list[Tensor]:
    total = _static(x.shape[axis(dim, x.rank)], "split")
    if isinstance(split_size, (list, tuple)):
        return _split(cx, x, list(split_size), dim)
    sizes = [min(int(split_size), total - start) for start in range(0, total, int(split_size))]
    return _split(cx, x, sizes, dim)


@aten("chunk")
def chunk(cx: Context, x: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
    total = _static(x.shape[axis(dim, x.rank)], "chunk")
    return split(cx, x, -(-total // int(chunks)), dim)


@aten("unbind")
def unbind(cx: Context, x: Tensor, dim: int = 0) -> list[Tensor]:
    d = axis(dim, x.rank)
    total = _static(x.shape[d], "unbind")
    shape = x.shape[:d] + x.shape[d + 1:]
    return [cx.one("reshape", [p], {"shape": shape}) for p in _split(cx, x, [1] * total, d)]


def _pad(cx: Context, x: Tensor, pad: list[int], mode: str, value: float) -> Tensor:
    """PyTorch's pad list runs from the last dim backwards, (begin, end) per dim; negative entries crop."""
    pairs = [(0, 0)] * x.rank
    for i in range(len(pad) // 2):
        pairs[x.rank - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    for d, (begin, end) in enumerate(pairs):  # crop first, then pad what is left
        if begin < 0 or end < 0:
            size = x.shape[d]
            x = cx.one("slice", [x], {"axis": d, "start": max(-begin, 0), "stop": as_size(size - max(-end, 0)), "step": 1})
    pads = tuple((max(b, 0), max(e, 0)) for b, e in pairs)
    if all(p == (0, 0) for p in pads):
        return x
    return cx.one("pad", [x], {"pads": pads, "mode": mode, "value": float(value or 0.0)})


@aten("constant_pad_nd")
def constant_pad(cx: Context, x: Tensor, pad: list[int], value: float = 0.0) -> Tensor:
    return _pad(cx, x, pad, "constant", value)


@aten("pad")
def pad(cx: Context, x: Tensor, pad: list[int], mode: str = "constant", value: float | None = None) -> Tensor:
    return _pad(cx, x, pad, mode, value or 0.0)


def _register_pad(prefix: str, mode: str) -> None:
    @aten(*(f"{prefix}{n}d" for n in (1, 2, 3)))
    def mode_pad(cx: Context, x: Tensor, pad: list[int]) -> Tensor:
        return _pad(cx, x, pad, mode, 0.0)


_register_pad("reflection_pad", "reflect")
_register_pad("replication_pad", "replicate")
_register_pad("_pad_circular", "circular")


def _axes(x: Tensor, dim: Any) -> tuple[int, ...]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(x.rank))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return tuple(sorted(axis(d, x.rank) for d in dims))


@aten("mean")
def mean(cx: Context, x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return cx.one("reduce_mean", [x], {"axes": _axes(x, dim), "keepdims": bool(keepdim)})


@aten("sum")
def sum_(cx: Context, x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return cx.one("reduce_sum", [x], {"axes": _axes(x, dim), "keepdims": bool(keepdim)})


@aten("amax")
def amax(cx: Context, x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return cx.one("reduce_max", [x], {"axes": _axes(x, dim), "keepdims": bool(keepdim)})


@aten("zeros", "ones", "full", "arange", "scalar_tensor", "zeros_like", "ones_like", "full_like", "tensor", "eye",
      "new_zeros", "new_ones", "new_full", "new_tensor", "linspace")
def creation(cx: Context, *args: Any, **kwargs: Any) -> Tensor:
    """Tensors made from sizes alone become constants (evaluated now by torch); a constant fill whose shape
    depends on the wildcard batch (an RNN's default zero states) is one element expanded to the batch."""
    fill = _batch_sized_fill(cx, args, kwargs)
    if fill is not None:
        return _filled(cx, fill)
    if any(isinstance(a, (Tensor, sympy.Basic)) for a in list(args[1:]) + list(kwargs.values())) or \
            (args and isinstance(args[0], sympy.Basic)) or not all(isinstance(s, int) for s in cx.meta_shape()):
        raise SolUnsupportedError("creating a tensor whose size depends on the wildcard batch or on another tensor is not supported")
    if args and isinstance(args[0], Tensor):  # *_like, new_*: only the shape/dtype of the argument matter
        source = cx.node.args[0].meta["val"]  # type: ignore[union-attr]
        args = (torch.empty(tuple(int(s) for s in source.shape), dtype=source.dtype),) + tuple(args[1:])
    kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory", "layout")}
    value = cx.node.target(*args, **kwargs)  # type: ignore[operator]
    return cx.graph.add_const(cx.where, np.asarray(value.detach().cpu().numpy()))


#: creation ops that fill with a constant -> the position of the fill value among their arguments (None: 0 or 1)
_FILLS: dict[str, int | None] = {"zeros": None, "new_zeros": None, "zeros_like": None, "ones": None, "new_ones": None,
                                 "ones_like": None, "full": 1, "new_full": 2, "full_like": 1}


def _batch_sized_fill(cx: Context, args: Any, kwargs: Any) -> float | None:
    """The fill value of a constant-fill creation op whose shape depends on the wildcard batch, else None."""
    kind = cx.node.target.__name__.split(".")[0]  # type: ignore[union-attr]
    if kind not in _FILLS or all(isinstance(s, int) for s in cx.meta_shape()):
        return None
    at = _FILLS[kind]
    if at is None:
        return 0.0 if "zeros" in kind else 1.0
    value = kwargs.get("fill_value", args[at] if len(args) > at else None)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@aten("im2col")
def im2col(cx: Context, x: Tensor, kernel_size: list[int], dilation: list[int], padding: list[int],
           stride: list[int]) -> Tensor:
    """F.unfold: every kernel position's (strided, dilated) window of the padded input, stacked into channels
    c * (kh * kw) + ki * kw + kj, the output positions flattened row-major."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (tuple(int(v) for v in a) for a in (kernel_size, dilation, padding, stride))
    if x.rank not in (3, 4):
        raise SolUnsupportedError(f"unfold of a rank-{x.rank} tensor is not supported (3-d or 4-d)")
    batched = x.rank == 4
    if not batched:
        x = cx.one("reshape", [x], {"shape": (1, *x.shape)})
    n, c, h, w = x.shape
    if not isinstance(h, int) or not isinstance(w, int):
        raise SolUnsupportedError("unfold along the wildcard batch dimension is not supported")
    if ph or pw:
        x = cx.one("pad", [x], {"pads": ((0, 0), (0, 0), (ph, ph), (pw, pw)), "mode": "constant", "value": 0.0})
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    windows = []
    for i in range(kh):
        rows = cx.one("slice", [x], {"axis": 2, "start": i * dh, "stop": i * dh + (oh - 1) * sh + 1, "step": sh})
        for j in range(kw):
            window = cx.one("slice", [rows], {"axis": 3, "start": j * dw, "stop": j * dw + (ow - 1) * sw + 1,
                                               "step": sw})
            windows.append(cx.one("reshape", [window], {"shape": (n, c, 1, oh, ow)}))
    stacked = windows[0] if len(windows) == 1 else cx.one("concat", windows, {"axis": 2})
    return cx.one("reshape", [stacked], {"shape": cx.meta_shape()})
