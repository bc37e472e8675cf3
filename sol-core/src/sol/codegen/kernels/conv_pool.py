"""A pooling layer fused depth first into the generated convolution before it.

conv -> relu -> avg_pool (max_pool, adaptive pooling, global pooling) as one
loop nest (`sol.codegen.cluster` decides when: the pool is the only reader of
the chain's last value): one task per pooled output row ``[n, oc, p...]``.
For each conv row its window needs, the task computes that row with the conv
kernel's own code (`dense.conv_row`, into ``acc[OW]``), applies the
elementwise chain in place (``Emit.into``), and reduces the row into the
pooled row buffer ``prow[PW]``: one SIMD loop over the pooled pixels per
window tap of the last dim, clipped to the taps inside the row (the conv's
own trick, no test per element). Then the pooled row is emitted (stage 1),
with the pool's own epilogue and stores. The full-size activation never
reaches memory.

Windows that overlap in the outer dims (3x3 stride 2) recompute the conv
rows they share (1.5x the conv's work there); windows of stride == kernel
compute every conv row once.
"""

from __future__ import annotations

from ...ir import Layer
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt, walk
from .base import KernelContext, ctype_of
from .dense import _parallel_loops, conv_row, single_pixel_conv
from .pool import _divisor, _lowest, _result, _Window, _window_acc_type

#: the pools a generated conv computes depth first
POOL_OPS = frozenset({"max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool"})


def fusable(conv: Layer, pool: Layer) -> bool:
    """Whether `conv_pool` implements ``pool`` over (an elementwise chain of) ``conv``'s output."""
    if conv.op != "conv" or pool.op not in POOL_OPS or len(conv.inputs) < 2:
        return False
    x, act, out = conv.inputs[0], pool.inputs[0], pool.outputs[0]
    r = x.rank - 2
    if r < 1 or act.rank != x.rank or out.rank != x.rank or single_pixel_conv(conv):
        return False
    if act.dtype != conv.outputs[0].dtype or not act.dtype.startswith("float") or act.dtype != out.dtype:
        return False
    if not all(isinstance(s, int) for s in (*x.shape[1:], *act.shape[1:], *out.shape[1:])):
        return False
    if pool.op in ("max_pool", "avg_pool"):
        return len(_Window.of(pool).kernel) == r
    return len(pool.attrs["output_size"]) == r


def conv_pool(conv: Layer, pool: Layer, kc: KernelContext) -> list[Node]:
    """The fused nest: stage-0 `Emit` per conv element (its chain ends in the row buffer ``acc``), stage-1 `Emit`
    per pooled element."""
    act, out = pool.inputs[0], pool.outputs[0]
    r = act.rank - 2
    last = r - 1
    t = ctype_of(act, pool)
    sizes = [int(s) for s in act.shape[2:]]  # the conv's output, the pool's input
    pooled = [int(s) for s in out.shape[2:]]
    adaptive = pool.op.startswith("adaptive")
    is_max = pool.op in ("max_pool", "adaptive_max_pool")
    acc_t = t if is_max else ("double" if adaptive else _window_acc_type(t, False))  # as the pool kernels do
    init = _lowest(out.dtype, t) if is_max else "0"
    positions = [f"p{d}" for d in range(r)]
    q = positions[last]

    def update(target: str, value: str) -> str:
        return f"{target} = sol_max<{acc_t}>({target}, {value});" if is_max else f"{target} += {value};"

    def bounds(d: int, b: str, e: str) -> Stmt:  # an adaptive pool's region along dim d: [b, e)
        return Stmt(f"const int64_t {b} = ({positions[d]} * {sizes[d]}) / {pooled[d]}, "
                    f"{e} = (({positions[d]} + 1) * {sizes[d]} + {pooled[d] - 1}) / {pooled[d]};")

    # the conv row (the chain's values left in acc), then its contribution to the pooled row
    row = conv_row(conv, kc, [f"o{d}" for d in range(last)])
    for node in walk(row):
        if isinstance(node, Emit):
            node.into = node.value
    if adaptive:
        part = Loop("w", "ew", [Stmt(update("part", "acc[w]"))], start="bw", vector=True,
                    reduction=("max" if is_max else "+", "part"))
        horizontal: list[Node] = [Loop(q, str(pooled[last]), [
            bounds(last, "bw", "ew"), Stmt(f"{acc_t} part = {init};"), part, Stmt(update(f"prow[{q}]", "part"))])]
    else:
        window = _Window.of(pool)
        k, s, dil, pad = window.kernel[last], window.stride[last], window.dilation[last], window.pads[last]
        tap: list[Node] = [
            Stmt(f"const int64_t plo = sol_max<int64_t>(0, sol_ceil_div({pad} - pk{last} * {dil}, {s}));"),
            Stmt(f"const int64_t phi = sol_min<int64_t>({pooled[last]}, "
                 f"sol_ceil_div({sizes[last] + pad} - pk{last} * {dil}, {s}));"),
            Loop(q, "phi", [Stmt(update(f"prow[{q}]", f"acc[{q} * {s} - {pad} + pk{last} * {dil}]"))], start="plo",
                 vector=True),
        ]
        horizontal = [Loop(f"pk{last}", str(k), tap)]
    body: list[Node] = [Block([*row, *horizontal], f"conv rows of the window: {conv.name} and its chain")]

    # the window's outer dims: the conv rows of pooled row p..., each computed as above
    top: list[Node] = []
    for d in reversed(range(last)):
        if adaptive:
            top.insert(0, bounds(d, f"b{d}", f"e{d}"))
            body = [Loop(f"o{d}", f"e{d}", body, start=f"b{d}")]
            continue
        window = _Window.of(pool)
        check = Stmt(f"const int64_t o{d} = {positions[d]} * {window.stride[d]} - {window.pads[d]} + "
                     f"pk{d} * {window.dilation[d]}; if (o{d} < 0 || o{d} >= {sizes[d]}) continue;")
        body = [Loop(f"pk{d}", str(window.kernel[d]), [check, *body])]

    # the pooled row: its value per pixel, emitted
    if adaptive:
        count = cexpr.mul(*(f"(e{d} - b{d})" for d in range(last)), "(ew - bw)")
        value = f"prow[{q}]" if is_max else f"({t})(prow[{q}] / (double)({count}))"
        finish: list[Node] = [bounds(last, "bw", "ew"), Emit(value, ("n", "oc", *positions), stage=1)]
    else:
        window = _Window.of(pool)
        divisor = _divisor(pool, window.kernel, window.stride, window.pads, [str(n) for n in sizes], positions,
                           window.dilation) if pool.op == "avg_pool" and not pool.attrs.get("divisor_override") else []
        finish = [*divisor, Emit(_result(pool, f"prow[{q}]", t, acc_t), ("n", "oc", *positions), stage=1)]
    task: list[Node] = [
        *top,
        Stmt(f"alignas(64) {acc_t} prow[{pooled[last]}];"),
        Loop(q, str(pooled[last]), [Stmt(f"prow[{q}] = {init};")], vector=True),
        *body,
        Loop(q, str(pooled[last]), finish, vector=True),
    ]
    channels = int(act.shape[1])
    return _parallel_loops(["n", "oc", *positions[:last]], [cexpr.size(out.shape[0]), str(channels),
                                                             *map(str, pooled[:last])], [Block(task)])
