"""Indexing kernels: gathers, arg-reductions, cumulative sums, and the reductions of `reduction_extra`.

An index outside its axis sets the runtime status (the Python side raises
SolInputError) and reads element 0 instead, never out of bounds.
"""

from __future__ import annotations

from ...ir import Layer
from ...ir.ops._shapes import normalize_axis
from .. import cexpr
from ..nest import Emit, Loop, Node, Stmt, index_vars, nest
from .base import KernelContext, ctype_of, kernel


def _checked_index(name: str, value: str, extent: str) -> list[Node]:
    """``int64_t name = value`` wrapped for negative indices and checked against ``extent``."""
    return [
        Stmt(f"int64_t {name} = (int64_t)({value});"),
        Stmt(f"if ({name} < 0) {name} += {extent};"),
        Stmt(f"if ({name} < 0 || {name} >= {extent}) {{ sol_fail(&sol_status, SOL_STATUS_INDEX); {name} = 0; }}"),
    ]


@kernel("gather")
def gather(layer: Layer, kc: KernelContext) -> list[Node]:
    x, indices = layer.inputs
    out = layer.outputs[0]
    axis = normalize_axis(int(layer.attrs["axis"]), x.rank)
    ovars = index_vars("i", out.rank)
    ir = indices.rank
    body = _checked_index("ix", kc.load(indices, ovars[axis:axis + ir]), cexpr.size(x.shape[axis]))
    body.append(Emit(kc.load(x, [*ovars[:axis], "ix", *ovars[axis + ir:]]), tuple(ovars)))
    return nest(ovars, [cexpr.size(s) for s in out.shape], body, vector_last=False)


@kernel("gather_elements")
def gather_elements(layer: Layer, kc: KernelContext) -> list[Node]:
    x, indices = layer.inputs
    out = layer.outputs[0]
    axis = normalize_axis(int(layer.attrs["axis"]), x.rank)
    ovars = index_vars("i", out.rank)
    body = _checked_index("ix", kc.load(indices, ovars), cexpr.size(x.shape[axis]))
    source = list(ovars)
    source[axis] = "ix"
    body.append(Emit(kc.load(x, source), tuple(ovars)))
    return nest(ovars, [cexpr.size(s) for s in out.shape], body, vector_last=False)


def _outer_and_axis(layer: Layer, rank: int) -> tuple[int, list[str], list[str]]:
    """(axis, loop variables of every other dim, the input index with the axis variable ``a``)."""
    axis = normalize_axis(int(layer.attrs["axis"]), rank)
    outer = [f"i{d}" for d in range(rank) if d != axis]
    index = [f"i{d}" if d != axis else "a" for d in range(rank)]
    return axis, outer, index


@kernel("argmax", "argmin")
def arg_extremum(layer: Layer, kc: KernelContext) -> list[Node]:
    x = layer.inputs[0]
    t = ctype_of(x, layer)
    axis, outer, index = _outer_and_axis(layer, x.rank)
    better = ">" if layer.op == "argmax" else "<"
    if layer.attrs.get("select_last_index", False):
        better += "="  # ties move to the later index
    keep = bool(layer.attrs.get("keepdims", True))
    out_index = tuple(f"i{d}" if d != axis else "0" for d in range(x.rank)) if keep else tuple(outer)
    body: list[Node] = [
        Stmt(f"{t} best = {kc.load(x, [v if v != 'a' else '0' for v in index])};"),
        Stmt("int64_t at = 0;"),
        Loop("a", cexpr.size(x.shape[axis]), [
            Stmt(f"const {t} xv = {kc.load(x, index)};"),
            Stmt(f"if (xv {better} best) {{ best = xv; at = a; }}"),
        ], start="1"),
        Emit("at", out_index),
    ]
    extents = [cexpr.size(x.shape[d]) for d in range(x.rank) if d != axis]
    return nest(outer, extents, body, vector_last=False)


@kernel("cumsum")
def cumsum(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    axis, outer, index = _outer_and_axis(layer, x.rank)
    extent = cexpr.size(x.shape[axis])
    step: list[Node] = []
    if layer.attrs.get("reverse", False):
        step.append(Stmt(f"const int64_t a = {extent} - 1 - r;"))
    else:
        step.append(Stmt("const int64_t a = r;"))
    add = Stmt(f"acc += {kc.load(x, index)};")
    emit = Emit("acc", tuple(index))
    step += [emit, add] if layer.attrs.get("exclusive", False) else [add, emit]
    body: list[Node] = [Stmt(f"{t} acc = 0;"), Loop("r", extent, step)]
    extents = [cexpr.size(x.shape[d]) for d in range(x.rank) if d != axis]
    return nest(outer, extents, body, vector_last=False)


@kernel("reduce_min", "reduce_prod")
def reduction(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    axes = sorted({normalize_axis(a, x.rank) for a in layer.attrs["axes"]}) if x.rank else []
    keep = bool(layer.attrs.get("keepdims", False))
    ovars = index_vars("i", out.rank)
    kept = iter(ovars)  # without keepdims the output dims are the kept input dims, in order
    in_index = [f"r{d}" if d in axes else (ovars[d] if keep else next(kept)) for d in range(x.rank)]
    if layer.op == "reduce_min":
        init = "INFINITY" if out.dtype.startswith("float") else f"std::numeric_limits<{t}>::max()"
        update = f"acc = sol_min<{t}>(acc, {kc.load(x, in_index)});"
    else:
        init, update = "1", f"acc *= {kc.load(x, in_index)};"
    inner: list[Node] = [Stmt(update)]
    for d in reversed(axes):
        inner = [Loop(f"r{d}", cexpr.size(x.shape[d]), inner)]
    body: list[Node] = [Stmt(f"{t} acc = {init};"), *inner, Emit("acc", tuple(ovars))]
    return nest(ovars, [cexpr.size(s) for s in out.shape], body, vector_last=False)
