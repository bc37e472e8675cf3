"""Data movement: every output element is a gather from an input, so epilogues fuse into these too."""

from __future__ import annotations

import sympy

from ...ir import Layer
from ...ir.ops._shapes import normalize_axis
from .. import cexpr
from ..nest import Emit, Node, Stmt, index_vars, nest, nest_in_order
from .base import KernelContext, kernel


def _copy_nest(out_shape: tuple, value_index_fn, emit_index_fn, output: int = 0, order=None) -> list[Node]:  # type: ignore[no-untyped-def]
    """A gather per element; ``order``: the loop order (a memory order, so the innermost loop is unit-stride)."""
    idx = index_vars("i", len(out_shape))
    body: list[Node] = [Emit(value_index_fn(idx), tuple(emit_index_fn(idx)), output)]
    return nest_in_order(idx, [cexpr.size(s) for s in out_shape], body, order)


@kernel("reshape")
def reshape(layer: Layer, kc: KernelContext) -> list[Node]:
    """A copy (reshapes are aliases unless the result must land in a buffer of its own, e.g. a model output)."""
    x, out = layer.inputs[0], layer.outputs[0]
    return _copy_nest(out.shape, lambda i: f"{kc.ptr(x)}[{cexpr.linear(i, out.shape)}]", lambda i: i)


@kernel("permute")
def permute(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    perm = [normalize_axis(p, x.rank) for p in layer.attrs["perm"]]

    def source(i: list[str]) -> str:
        src = [""] * x.rank
        for d, p in enumerate(perm):
            src[p] = i[d]
        return kc.load(x, src)

    return _copy_nest(out.shape, source, lambda i: i)


@kernel("expand")
def expand(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    return _copy_nest(out.shape, lambda i: kc.load_broadcast(x, i, out.shape), lambda i: i)


@kernel("slice")
def slice_(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    axis = normalize_axis(layer.attrs["axis"], x.rank)
    start, step = int(layer.attrs["start"]), int(layer.attrs["step"])

    def source(i: list[str]) -> str:
        src = list(i)
        src[axis] = cexpr.add(cexpr.mul(i[axis], str(step)), str(start))
        return kc.load(x, src)

    return _copy_nest(out.shape, source, lambda i: i, order=kc.layout(out))


@kernel("concat")
def concat(layer: Layer, kc: KernelContext) -> list[Node]:
    """One nest per input, each emitting into its slab of the output."""
    out = layer.outputs[0]
    axis = normalize_axis(layer.attrs["axis"], out.rank)
    nodes: list[Node] = []
    offset: sympy.Expr | int = 0
    for t in layer.inputs:
        off = cexpr.size(offset if isinstance(offset, int) else sympy.simplify(offset))

        def target(i: list[str], off: str = off) -> list[str]:
            dst = list(i)
            dst[axis] = cexpr.add(i[axis], off)
            return dst

        nodes += _copy_nest(t.shape, lambda i, t=t: kc.load(t, i), target, order=kc.layout(out))  # type: ignore[misc]
        offset = offset + t.shape[axis]
    return nodes


@kernel("split")
def split(layer: Layer, kc: KernelContext) -> list[Node]:
    x = layer.inputs[0]
    axis = normalize_axis(layer.attrs["axis"], x.rank)
    nodes: list[Node] = []
    offset = 0
    for k, out in enumerate(layer.outputs):
        def source(i: list[str], off: int = offset) -> str:
            src = list(i)
            src[axis] = cexpr.add(i[axis], str(off))
            return kc.load(x, src)

        nodes += _copy_nest(out.shape, source, lambda i: i, output=k, order=kc.layout(out))
        offset += int(layer.attrs["sizes"][k])
    return nodes


@kernel("pad")
def pad(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    mode = layer.attrs.get("mode", "constant")
    pads = [(int(b), int(e)) for b, e in layer.attrs["pads"]]
    idx = index_vars("i", out.rank)
    src = [f"p{d}" if pads[d] != (0, 0) else idx[d] for d in range(out.rank)]
    body: list[Node] = []
    inside: list[str] = []
    for d, (b, _) in enumerate(pads):
        if pads[d] == (0, 0):
            continue
        size = cexpr.size(x.shape[d])
        body.append(Stmt(f"int64_t p{d} = {idx[d]} - {b};"))
        if mode == "constant":
            inside.append(f"p{d} >= 0 && p{d} < {size}")
        elif mode == "reflect":
            body.append(Stmt(f"p{d} = p{d} < 0 ? -p{d} : (p{d} >= {size} ? 2 * ({size} - 1) - p{d} : p{d});"))
        elif mode == "replicate":
            body.append(Stmt(f"p{d} = sol_min<int64_t>(sol_max<int64_t>(p{d}, 0), {size} - 1);"))
        elif mode == "circular":
            body.append(Stmt(f"p{d} = ((p{d} % {size}) + {size}) % {size};"))
    if mode == "constant" and inside:
        fill = cexpr.literal(layer.attrs.get("value", 0.0) or 0, out.dtype)
        value = f"(({' && '.join(inside)}) ? {kc.load(x, src)} : {fill})"
    else:
        value = kc.load(x, src)
    body.append(Emit(value, tuple(idx)))
    return nest_in_order(idx, [cexpr.size(s) for s in out.shape], body, kc.layout(out))


@kernel("channel_shuffle")
def channel_shuffle(layer: Layer, kc: KernelContext) -> list[Node]:
    """Output channel c = j*g + k reads input channel k*(C/g) + j."""
    x, out = layer.inputs[0], layer.outputs[0]
    groups = int(layer.attrs["groups"])
    per = cexpr.static(x.shape[1], f"channels of {layer.name!r}") // groups

    def source(i: list[str]) -> str:
        src = list(i)
        src[1] = f"(({i[1]} % {groups}) * {per} + {i[1]} / {groups})"
        return kc.load(x, src)

    return _copy_nest(out.shape, source, lambda i: i, order=kc.layout(out))


@kernel("embedding")
def embedding(layer: Layer, kc: KernelContext) -> list[Node]:
    """weight[index]; an index outside [0, V) raises SolInputError on the Python side (status code), never reads out of bounds."""
    indices, weight = layer.inputs
    vocab = cexpr.size(weight.shape[0])
    width = cexpr.size(weight.shape[1])
    ivars = index_vars("i", indices.rank)
    body: list[Node] = [
        Stmt(f"int64_t ix = (int64_t){kc.load(indices, ivars)};"),
        Stmt(f"if (ix < 0 || ix >= {vocab}) {{ sol_fail(&sol_status, SOL_STATUS_INDEX); ix = 0; }}"),
        *nest(["e"], [width], [Emit(f"{kc.ptr(weight)}[ix * {width} + e]", (*ivars, "e"))]),
    ]
    return nest(ivars, [cexpr.size(s) for s in indices.shape], body, vector_last=False)
