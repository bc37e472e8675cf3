"""Indexing aten ops: gathers by index tensors (torch.gather, index_select), cumulative sums and products,
arg-reductions and min/max with indices."""

from __future__ import annotations

from typing import Any

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
