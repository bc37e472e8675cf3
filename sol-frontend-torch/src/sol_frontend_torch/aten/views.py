"""Writes through views: ``x[:, 1:] = y`` or ``x[:, 0].add_(1)`` change ``x`` too.

torch.export keeps such writes as in-place ops on view nodes (``slice``, ``select``, ``view``, ``permute`` ...),
e.g. ``copy_(slice(slice(x)), y)``. SOL's graph has values, not memory, so the converter rebuilds each tensor the
view was taken from: `write_into_view` gives the base's new value from its old value and the view's new value
(a concat of the untouched parts around a written slice, a reshape or permute back for shape views), and the
converter walks up the chain of views to the root (`sol_frontend_torch.convert.Converter._write`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sol.errors import SolUnsupportedError
from sol.ir import Tensor, as_size

from ._registry import Context, aten, axis

_TO_END = 2 ** 62

#: view ops that share memory with their first argument, so an in-place write into them writes into it
_SHAPE_VIEWS = frozenset({"view", "_unsafe_view", "unsqueeze", "squeeze", "unflatten", "view_as", "_reshape_alias"})
_PERMUTES = frozenset({"permute", "transpose", "swapaxes", "swapdims", "t", "numpy_T"})
_ALIASES = frozenset({"alias", "detach"})
VIEW_WRITES = frozenset({"slice", "select"}) | _SHAPE_VIEWS | _PERMUTES | _ALIASES


def _key(node: torch.fx.Node) -> str:
    from ..convert import in_place, op_key

    key = op_key(node.target)
    return "alias" if in_place(key) else key


def _bounds(start: Any, end: Any, size: Any) -> tuple[Any, Any]:
    def clamp(value: Any, default: Any) -> Any:
        if value is None:
            return default
        if isinstance(value, int) and value >= _TO_END:
            return size
        if isinstance(value, int) and value < 0:
            return as_size(size + value)
        return min(value, size) if isinstance(value, int) and isinstance(size, int) else value

    return clamp(start, 0), clamp(end, size)


def _insert_slice(cx: Context, base: Tensor, value: Tensor, d: int, start: Any, stop: Any, step: int) -> Tensor:
    """``base`` with ``base[start:stop:step]`` along ``d`` replaced by ``value``."""
    size = base.shape[d]
    if step == 1:
        pieces = []
        if start != 0:
            pieces.append(cx.one("slice", [base], {"axis": d, "start": 0, "stop": start, "step": 1}))
        pieces.append(value)
        if as_size(size - stop) != 0:
            pieces.append(cx.one("slice", [base], {"axis": d, "start": stop, "stop": size, "step": 1}))
        return pieces[0] if len(pieces) == 1 else cx.one("concat", pieces, {"axis": d})
    if not all(isinstance(s, int) for s in value.shape):
        raise SolUnsupportedError("writing into a strided slice of a tensor with a wildcard batch is not supported")
    positions = np.arange(int(value.shape[d])) * step + int(start)
    shape = [1] * value.rank
    shape[d] = len(positions)
    index = np.broadcast_to(positions.reshape(shape), tuple(int(s) for s in value.shape)).astype(np.int64)
    return cx.one("scatter_elements", [base, cx.graph.add_const("view_write_index", index.copy()), value], {"axis": d})


def write_into_view(cx: Context, view: torch.fx.Node, base: Tensor, value: Tensor) -> Tensor:
    """The new value of the tensor ``view`` was taken from (whose value was ``base``), now that ``view`` is ``value``."""
    key = _key(view)
    args = list(view.args)
    if key in _ALIASES:
        return value
    if key in _SHAPE_VIEWS:
        return value if tuple(value.shape) == tuple(base.shape) else cx.one("reshape", [value], {"shape": tuple(base.shape)})
    if key in _PERMUTES:
        if key == "permute":
            perm = [axis(int(p), base.rank) for p in args[1]]
        else:
            perm = list(range(base.rank))
            if key in ("t", "numpy_T") and base.rank < 2:
                return value
            a, b = (0, 1) if key in ("t",) else (0, base.rank - 1) if key == "numpy_T" else \
                (axis(int(args[1]), base.rank), axis(int(args[2]), base.rank))
            perm[a], perm[b] = perm[b], perm[a]
        inverse = tuple(int(i) for i in np.argsort(perm))
        return value if inverse == tuple(range(base.rank)) else cx.one("permute", [value], {"perm": inverse})
    if key == "select":
        d = axis(int(args[1]), base.rank)
        index = int(args[2])
        index = as_size(base.shape[d] + index) if index < 0 else index
        expanded = cx.one("reshape", [value], {"shape": (*value.shape[:d], 1, *value.shape[d:])})
        return _insert_slice(cx, base, expanded, d, index, as_size(index + 1), 1)
    if key == "slice":
        d = axis(int(args[1]) if len(args) > 1 else 0, base.rank)
        start, stop = _bounds(args[2] if len(args) > 2 else None, args[3] if len(args) > 3 else None, base.shape[d])
        step = int(args[4]) if len(args) > 4 else 1
        return _insert_slice(cx, base, value, d, start, stop, step)
    raise SolUnsupportedError(f"writing in place into the result of {key} is not supported")


@aten("copy_")
def copy_(cx: Context, target: Tensor, source: Any, non_blocking: bool = False) -> Tensor:
    """target[...] = source: the source, broadcast to the target's shape and cast to its dtype."""
    value = source if isinstance(source, Tensor) else cx.const(source)
    if value.dtype != target.dtype:
        value = cx.one("cast", [value], {"dtype": target.dtype})
    if tuple(value.shape) != tuple(target.shape):
        value = cx.one("expand", [value], {"shape": tuple(target.shape)})
    return value


@aten("fill_")
def fill_(cx: Context, target: Tensor, value: Any) -> Tensor:
    """target[...] = value (a Python number or a 0-d tensor)."""
    return copy_(cx, target, value)


@aten("zero_")
def zero_(cx: Context, target: Tensor) -> Tensor:
    return copy_(cx, target, False if target.dtype == "bool" else 0)
