"""Scatter kernels (scatter_elements, scatter_nd) and the N-d gather (gather_nd).

A scatter writes to places only its indices know, so it works on a scratch
copy of ``data`` (heap memory, as the pooling gradients do): copy data in
(parallel), apply the updates in index order (serial: repeated indices must
resolve as the reference does), then emit the scratch copy (parallel).
An index outside its axis sets the runtime status and skips the update.
"""

from __future__ import annotations

from ...ir import Layer
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt, index_vars, nest
from .base import KernelContext, ctype_of, kernel, unsupported


def _checked(name: str, value: str, extent: str) -> list[Node]:
    """``int64_t name = value``, negative counting from the end; outside the axis: status set, ``ok`` cleared."""
    return [
        Stmt(f"int64_t {name} = (int64_t)({value});"),
        Stmt(f"if ({name} < 0) {name} += {extent};"),
        Stmt(f"if ({name} < 0 || {name} >= {extent}) {{ sol_fail(&sol_status, SOL_STATUS_INDEX); ok = false; }}"),
    ]


def _combine(target: str, value: str, reduction: str, t: str) -> str:
    if reduction == "none":
        return f"{target} = {value};"
    if reduction == "add":
        return f"{target} += {value};"
    if reduction == "mul":
        return f"{target} *= {value};"
    if reduction in ("max", "min"):
        return f"{target} = sol_{reduction}<{t}>({target}, {value});"
    raise AssertionError(reduction)


def _scatter(layer: Layer, kc: KernelContext, updates_loops: list[str], updates_extents: list[str],
             target_body: list[Node]) -> list[Node]:
    """scratch = data; ``target_body`` per update (it sets ``ok`` and ``at``, the linear target); emit scratch."""
    data, _, updates = layer.inputs
    out = layer.outputs[0]
    t = ctype_of(out, layer)
    reduction = str(layer.attrs.get("reduction", "none"))
    total = cexpr.mul(*(cexpr.size(s) for s in data.shape)) if data.rank else "1"
    dvars = index_vars("d", data.rank)
    uvars = updates_loops
    apply = Stmt(f"if (ok) {_combine('buf[at]', kc.load(updates, uvars), reduction, t)}")
    scatter_body: list[Node] = [Stmt("bool ok = true;"), *target_body, apply]
    ovars = index_vars("i", out.rank)
    return [Block([
        Stmt(f"{t}* buf = new {t}[{total}];"),
        *nest(dvars, [cexpr.size(s) for s in data.shape],
              [Stmt(f"buf[{cexpr.linear(dvars, data.shape)}] = {kc.load(data, dvars)};")], vector_last=False),
        *nest(uvars, updates_extents, [Block(scatter_body)], parallel=0, vector_last=False),
        *nest(ovars, [cexpr.size(s) for s in out.shape], [Emit(f"buf[{cexpr.linear(ovars, out.shape)}]", tuple(ovars))],
              vector_last=False),
        Stmt("delete[] buf;"),
    ])]


@kernel("scatter_elements")
def scatter_elements(layer: Layer, kc: KernelContext) -> list[Node]:
    data, indices, updates = layer.inputs
    axis = int(layer.attrs["axis"]) % data.rank
    uvars = index_vars("u", updates.rank)
    target = list(uvars)
    target[axis] = "ix"
    body = [*_checked("ix", kc.load(indices, uvars), cexpr.size(data.shape[axis])),
            Stmt(f"const int64_t at = {cexpr.linear(target, data.shape)};")]
    return _scatter(layer, kc, uvars, [cexpr.size(s) for s in updates.shape], body)


@kernel("scatter_nd")
def scatter_nd(layer: Layer, kc: KernelContext) -> list[Node]:
    data, indices, updates = layer.inputs
    depth = int(indices.shape[-1])
    lead = indices.rank - 1
    uvars = index_vars("u", updates.rank)
    body: list[Node] = []
    for k in range(depth):
        body += _checked(f"ix{k}", kc.load(indices, [*uvars[:lead], str(k)]), cexpr.size(data.shape[k]))
    target = [f"ix{k}" for k in range(depth)] + uvars[lead:]
    body.append(Stmt(f"const int64_t at = {cexpr.linear(target, data.shape)};"))
    return _scatter(layer, kc, uvars, [cexpr.size(s) for s in updates.shape], body)


@kernel("gather_nd")
def gather_nd(layer: Layer, kc: KernelContext) -> list[Node]:
    data, indices = layer.inputs
    out = layer.outputs[0]
    batch = int(layer.attrs.get("batch_dims", 0))
    depth = int(indices.shape[-1])
    lead = indices.rank - 1
    if batch > lead:
        raise unsupported(layer, "batch_dims beyond the index tuples")
    ovars = index_vars("i", out.rank)
    body: list[Node] = []
    for k in range(depth):
        ix = f"ix{k}"
        body += [
            Stmt(f"int64_t {ix} = (int64_t)({kc.load(indices, [*ovars[:lead], str(k)])});"),
            Stmt(f"if ({ix} < 0) {ix} += {cexpr.size(data.shape[batch + k])};"),
            Stmt(f"if ({ix} < 0 || {ix} >= {cexpr.size(data.shape[batch + k])}) "
                 f"{{ sol_fail(&sol_status, SOL_STATUS_INDEX); {ix} = 0; }}"),
        ]
    source = [*ovars[:batch], *(f"ix{k}" for k in range(depth)), *ovars[lead:]]
    body.append(Emit(kc.load(data, source), tuple(ovars)))
    return nest(ovars, [cexpr.size(s) for s in out.shape], body, vector_last=False)



@kernel("topk")
def topk(layer: Layer, kc: KernelContext) -> list[Node]:
    """Per slice along the axis: insertion into a sorted list of the best k (strict comparisons: ties keep index order)."""
    x = layer.inputs[0]
    t = ctype_of(x, layer)
    axis = int(layer.attrs["axis"]) % x.rank
    k = int(layer.attrs["k"])
    better = ">" if layer.attrs.get("largest", True) else "<"
    outer = [f"i{d}" for d in range(x.rank) if d != axis]
    source = [f"i{d}" if d != axis else "a" for d in range(x.rank)]
    target = tuple(f"i{d}" if d != axis else "j" for d in range(x.rank))
    if k == 0:
        return []
    body: list[Node] = [
        Stmt(f"{t} best[{k}]; int64_t at[{k}]; int64_t filled = 0;"),
        Loop("a", cexpr.size(x.shape[axis]), [
            Stmt(f"const {t} xv = {kc.load(x, source)};"),
            Stmt("int64_t p = filled;"),
            Stmt(f"while (p > 0 && xv {better} best[p - 1]) --p;"),
            Stmt(f"if (p >= {k}) continue;"),
            Stmt(f"for (int64_t q = (filled < {k} ? filled : {k} - 1); q > p; --q) {{ best[q] = best[q - 1]; at[q] = at[q - 1]; }}"),
            Stmt(f"best[p] = xv; at[p] = a; if (filled < {k}) ++filled;"),
        ]),
        Loop("j", str(k), [Emit("best[j]", target, 0), Emit("at[j]", target, 1)]),
    ]
    extents = [cexpr.size(x.shape[d]) for d in range(x.rank) if d != axis]
    return nest(outer, extents, [Block(body)], vector_last=False)


@kernel("cumprod")
def cumprod(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    axis = int(layer.attrs["axis"]) % x.rank
    outer = [f"i{d}" for d in range(x.rank) if d != axis]
    index = [f"i{d}" if d != axis else "a" for d in range(x.rank)]
    extent = cexpr.size(x.shape[axis])
    step: list[Node] = [Stmt(f"const int64_t a = {extent} - 1 - r;" if layer.attrs.get("reverse", False)
                             else "const int64_t a = r;")]
    mul = Stmt(f"acc *= {kc.load(x, index)};")
    emit = Emit("acc", tuple(index))
    step += [emit, mul] if layer.attrs.get("exclusive", False) else [mul, emit]
    body: list[Node] = [Stmt(f"{t} acc = 1;"), Loop("r", extent, step)]
    extents = [cexpr.size(x.shape[d]) for d in range(x.rank) if d != axis]
    return nest(outer, extents, [Block(body)], vector_last=False)


@kernel("max_pool_indices")
def max_pool_indices(layer: Layer, kc: KernelContext) -> list[Node]:
    from ...ir.ops.pool_indices import pads_of

    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    kernel_sizes = [int(k) for k in layer.attrs["kernel"]]
    r = len(kernel_sizes)
    stride = [int(s) for s in (layer.attrs.get("stride") or kernel_sizes)]
    dilation = [int(d) for d in (layer.attrs.get("dilation") or [1] * r)]
    pads = [b for b, _ in pads_of(layer.attrs)]
    ins = [cexpr.size(s) for s in x.shape[2:]]
    ovars = index_vars("i", out.rank)
    hs = [f"h{d}" for d in range(r)]
    spatial = list(reversed(hs)) if int(layer.attrs.get("storage_order", 0)) == 1 else hs
    sizes = list(reversed(ins)) if int(layer.attrs.get("storage_order", 0)) == 1 else ins
    flat = cexpr.linear([cexpr.linear(ovars[:2], x.shape[:2]), *spatial], [x.shape[0], *sizes])
    inner: list[Node] = [Stmt(f"const {t} xv = {kc.load(x, [*ovars[:2], *hs])};"),
                         Stmt(f"if (at < 0 || xv > acc) {{ acc = xv; at = {flat}; }}")]
    for d in reversed(range(r)):
        check = Stmt(f"const int64_t h{d} = {ovars[2 + d]} * {stride[d]} - {pads[d]} + k{d} * {dilation[d]}; "
                     f"if (h{d} < 0 || h{d} >= {ins[d]}) continue;")
        inner = [Loop(f"k{d}", str(kernel_sizes[d]), [check, *inner])]
    body: list[Node] = [Stmt(f"{t} acc = 0; int64_t at = -1;"), *inner,
                        Emit("acc", tuple(ovars), 0), Emit("at", tuple(ovars), 1)]
    return nest(ovars, [cexpr.size(s) for s in out.shape], body, vector_last=False)
