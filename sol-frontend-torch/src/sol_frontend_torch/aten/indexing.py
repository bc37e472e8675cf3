"""Indexing aten ops: gathers by index tensors (torch.gather, index_select, advanced indexing), cumulative sums and
products, min/max with indices and arg-reductions, masked_fill, stack, repeat, triu/tril.

The last ones are compositions of SOL ops (where, reshape + concat, reshape + expand), so their shape rules,
references, gradients and generated code are those of the ops they are made of.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.errors import SolUnsupportedError
from sol.ir import Tensor, TensorType
from sol.ir.ops import broadcast

from ._registry import Context, aten, axis


@aten("gather")
def gather(cx: Context, x: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    """torch.gather: out[i] = x[i with i[dim] = index[i]] (ONNX's GatherElements); index may be smaller than x."""
    if x.rank == 0:
        return x
    return cx.one("gather_elements", [x, index], {"axis": axis(dim, x.rank)})


@aten("index_select")
def index_select(cx: Context, x: Tensor, dim: int, index: Tensor) -> Tensor:
    """x.index_select(dim, index) with a 1-d (or 0-d) index: numpy's take along dim."""
    if x.rank == 0:
        return x
    out = cx.one("gather", [x, index], {"axis": axis(dim, x.rank)})
    if index.rank == 0:  # index_select keeps the dim (size 1) for a 0-d index
        out = cx.one("reshape", [out], {"shape": cx.meta_shape()})
    return out


@aten("take_along_dim")
def take_along_dim(cx: Context, x: Tensor, index: Tensor, dim: int | None = None) -> Tensor:
    if dim is None:
        raise SolUnsupportedError("take_along_dim without dim (on the flattened tensor) is not supported")
    d = axis(dim, x.rank)
    shape = cx.meta_shape()
    x_shape = tuple(x.shape[i] if i == d else s for i, s in enumerate(shape))
    i_shape = tuple(index.shape[i] if i == d else s for i, s in enumerate(shape))
    if tuple(x.shape) != x_shape:
        x = cx.one("expand", [x], {"shape": x_shape})
    if tuple(index.shape) != i_shape:
        index = cx.one("expand", [index], {"shape": i_shape})
    return cx.one("gather_elements", [x, index], {"axis": d})


@aten("index")
def index(cx: Context, x: Tensor, indices: list[Tensor | None]) -> Tensor:
    """x[..., i, j, ...] with integer index tensors (None: a whole dim), PyTorch's (numpy's) advanced indexing.

    One index tensor is a take along its dim; several are broadcast, stacked into index tuples and read with
    gather_nd (the indexed dims moved to the front first). The broadcast index dims land where the indexed dims
    were when those are adjacent, else in front (numpy's rule).
    """
    positions = [d for d, i in enumerate(indices) if i is not None]
    if any(indices[d].dtype == "bool" for d in positions):  # type: ignore[union-attr]
        raise SolUnsupportedError("indexing with a bool mask (its result's size depends on the mask's values) is "
                                  "not supported; use torch.where or masked_fill")
    if not positions:
        return x
    if len(positions) == 1:
        return cx.one("gather", [x, indices[positions[0]]], {"axis": positions[0]})  # type: ignore[list-item]
    shape = cx.meta_shape()
    tensors = [indices[d] for d in positions]
    common = tuple(d.size for d in broadcast([TensorType(t.dims, t.dtype) for t in tensors]))  # type: ignore[union-attr]
    columns = []
    for t in tensors:
        assert t is not None
        if tuple(t.shape) != common:
            t = cx.one("expand", [t], {"shape": common})
        columns.append(cx.one("reshape", [t], {"shape": (*common, 1)}))
    stacked = cx.one("concat", columns, {"axis": len(common)})
    rest = [d for d in range(x.rank) if d not in positions]
    perm = tuple(positions + rest)
    moved = x if perm == tuple(range(x.rank)) else cx.one("permute", [x], {"perm": perm})
    out = cx.one("gather_nd", [moved, stacked], {"batch_dims": 0})
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    if adjacent and positions[0] > 0:  # rest[:p0] + broadcast dims + rest[p0:]
        k, lead = len(common), positions[0]
        order = tuple(range(k, k + lead)) + tuple(range(k)) + tuple(range(k + lead, out.rank))
        out = cx.one("permute", [out], {"perm": order})
    assert len(shape) == out.rank
    return out


@aten("cumsum", "cumprod")
def cumulative(cx: Context, x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """The running sum / product along dim; a dtype (or torch's widening of ints and bools to int64) is a cast first."""
    want = str(cx.node.meta["val"].dtype).removeprefix("torch.")
    if x.dtype != want:
        x = cx.one("cast", [x], {"dtype": want})
    name = cx.node.target.__name__.split(".")[0]  # type: ignore[union-attr]
    return cx.one(name, [x], {"axis": axis(dim, x.rank)})


def _dims(x: Tensor, dim: Any) -> tuple[int, ...]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(x.rank))
    return tuple(sorted(axis(d, x.rank) for d in (dim if isinstance(dim, (list, tuple)) else [dim])))


def _extremum(cx: Context, x: Tensor, dim: Any, keepdim: bool, largest: bool) -> Any:
    """max/min: of everything (no dim), or along dim as (values, indices) (torch's first index among ties)."""
    reduce = "reduce_max" if largest else "reduce_min"
    if dim is None:
        return cx.one(reduce, [x], {"axes": _dims(x, None), "keepdims": False})
    d = axis(dim, x.rank)
    values = cx.one(reduce, [x], {"axes": (d,), "keepdims": bool(keepdim)})
    indices = cx.one("argmax" if largest else "argmin", [x], {"axis": d, "keepdims": bool(keepdim)})
    return values, indices


@aten("max")
def max_(cx: Context, x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    if isinstance(dim, Tensor):  # torch.max(a, b): elementwise
        return cx.one("maximum", [x, dim])
    return _extremum(cx, x, dim, keepdim, True)


@aten("min")
def min_(cx: Context, x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    if isinstance(dim, Tensor):
        return cx.one("minimum", [x, dim])
    return _extremum(cx, x, dim, keepdim, False)


@aten("amin")
def amin(cx: Context, x: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return cx.one("reduce_min", [x], {"axes": _dims(x, dim), "keepdims": bool(keepdim)})


@aten("prod")
def prod(cx: Context, x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return cx.one("reduce_prod", [x], {"axes": _dims(x, dim), "keepdims": bool(keepdim)})


def _register_arg(name: str) -> None:
    @aten(name)
    def arg(cx: Context, x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
        if dim is None:  # over the flattened tensor
            flat = cx.one("reshape", [x], {"shape": (x.numel,)}) if x.rank != 1 else x
            out = cx.one(name, [flat], {"axis": 0, "keepdims": False})
            return cx.one("reshape", [out], {"shape": cx.meta_shape()}) if keepdim else out
        return cx.one(name, [x], {"axis": axis(dim, x.rank), "keepdims": bool(keepdim)})


_register_arg("argmax")
_register_arg("argmin")


@aten("masked_fill")
def masked_fill(cx: Context, x: Tensor, mask: Tensor, value: Any) -> Tensor:
    """value where the (broadcast) bool mask holds, else x."""
    fill = value if isinstance(value, Tensor) else cx.const(value)
    return cx.one("where", [mask, fill, x])


@aten("stack")
def stack(cx: Context, tensors: list[Tensor], dim: int = 0) -> Tensor:
    d = axis(dim, tensors[0].rank + 1)
    parts = [cx.one("reshape", [t], {"shape": (*t.shape[:d], 1, *t.shape[d:])}) for t in tensors]
    return parts[0] if len(parts) == 1 else cx.one("concat", parts, {"axis": d})


@aten("repeat")
def repeat(cx: Context, x: Tensor, repeats: list[Any]) -> Tensor:
    """Tiles: each dim of size s repeated r times is (r, s) broadcast, then flattened (the copy index is outer)."""
    lead = len(repeats) - x.rank
    shape = (1,) * lead + tuple(x.shape)
    split: list[Any] = []
    tiled: list[Any] = []
    for r, s in zip(repeats, shape, strict=True):
        split += [1, s]
        tiled += [r, s]
    y = cx.one("reshape", [x], {"shape": tuple(split)})
    y = cx.one("expand", [y], {"shape": tuple(tiled)})
    return cx.one("reshape", [y], {"shape": cx.meta_shape()})


def _register_triangle(name: str) -> None:
    @aten(name)
    def triangle(cx: Context, x: Tensor, diagonal: int = 0) -> Tensor:
        """x where the constant triangle mask of the last two dims holds, else 0."""
        rows, cols = x.shape[-2], x.shape[-1]
        if not isinstance(rows, int) or not isinstance(cols, int):
            raise SolUnsupportedError(f"{name} along the wildcard batch dimension is not supported")
        keep = (np.tril if name == "tril" else np.triu)(np.ones((rows, cols), dtype=bool), int(diagonal))
        zero = cx.const(False if x.dtype == "bool" else 0 if not x.dtype.startswith(("float", "bfloat")) else 0.0)
        return cx.one("where", [cx.graph.add_const(f"{name}_mask", keep), x, zero])


_register_triangle("triu")
_register_triangle("tril")


@aten("tile")
def tile(cx: Context, x: Tensor, dims: list[Any]) -> Tensor:
    """torch.tile: repeat with the repeats padded with leading 1s to the tensor's rank."""
    return repeat(cx, x, [1] * max(x.rank - len(dims), 0) + list(dims))


@aten("repeat_interleave")
def repeat_interleave(cx: Context, x: Any, repeats: Any = None, dim: int | None = None, *,
                      output_size: Any = None) -> Tensor:
    """Each element repeated ``repeats`` times along dim: (.., s, 1, ..) broadcast to (.., s, r, ..), flattened.

    Only a constant count: per-element counts from a tensor give a size that depends on values.
    """
    if not isinstance(x, Tensor) or isinstance(repeats, Tensor) or not isinstance(repeats, int):
        raise SolUnsupportedError("repeat_interleave with a tensor of counts (its result's size depends on the "
                                  "values) is not supported; repeat by a constant count")
    if dim is None:
        x = cx.one("reshape", [x], {"shape": (x.numel,)}) if x.rank != 1 else x
        dim = 0
    d = axis(dim, x.rank)
    shape = tuple(x.shape)
    y = cx.one("reshape", [x], {"shape": (*shape[:d + 1], 1, *shape[d + 1:])})
    y = cx.one("expand", [y], {"shape": (*shape[:d + 1], int(repeats), *shape[d + 1:])})
    return cx.one("reshape", [y], {"shape": cx.meta_shape()})


@aten("roll")
def roll(cx: Context, x: Tensor, shifts: Any, dims: Any = ()) -> Tensor:
    """torch.roll: per (shift, dim), the last ``shift`` rows then the rest (two slices and a concat); no dims rolls
    the flattened tensor."""
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    if not dims:
        flat = cx.one("reshape", [x], {"shape": (x.numel,)}) if x.rank != 1 else x
        rolled = roll(cx, flat, shifts[:1], [0])
        return rolled if x.rank == 1 else cx.one("reshape", [rolled], {"shape": tuple(x.shape)})
    if len(shifts) != len(dims):
        raise SolUnsupportedError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    for shift, dim in zip(shifts, dims, strict=True):
        d = axis(dim, x.rank)
        size = x.shape[d]
        if not isinstance(size, int) or not isinstance(shift, int):
            raise SolUnsupportedError("rolling along the wildcard batch dimension (or by a shift computed from it) is "
                                      "not supported")
        k = shift % size if size else 0
        if k == 0:
            continue
        tail = cx.one("slice", [x], {"axis": d, "start": size - k, "stop": size, "step": 1})
        head = cx.one("slice", [x], {"axis": d, "start": 0, "stop": size - k, "step": 1})
        x = cx.one("concat", [tail, head], {"axis": d})
    return x


@aten("diff")
def diff(cx: Context, x: Tensor, n: int = 1, dim: int = -1, prepend: Tensor | None = None,
         append: Tensor | None = None) -> Tensor:
    """torch.diff: x[1:] - x[:-1] along dim, n times, after prepending/appending; bools differ where they are not
    equal (torch's xor)."""
    d = axis(dim, x.rank)
    parts = [t for t in (prepend, x, append) if t is not None]
    if len(parts) > 1:
        x = cx.one("concat", parts, {"axis": d})
    for _ in range(int(n)):
        size = x.shape[d]
        if not isinstance(size, int):
            raise SolUnsupportedError("diff along the wildcard batch dimension is not supported")
        later = cx.one("slice", [x], {"axis": d, "start": 1, "stop": size, "step": 1})
        earlier = cx.one("slice", [x], {"axis": d, "start": 0, "stop": size - 1, "step": 1})
        x = cx.one("ne" if x.dtype == "bool" else "sub", [later, earlier])
    return x
