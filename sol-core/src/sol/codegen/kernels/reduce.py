"""Reductions, softmax and normalisations: statistics per row, then an emitting loop (epilogues fuse there)."""

from __future__ import annotations

from ...ir import Layer, Tensor, is_static
from ...ir.ops._shapes import normalize_axis
from .. import cexpr
from ..nest import Emit, Loop, Node, Stmt, index_vars, nest
from .base import KernelContext, ctype_of, kernel, optional_input


def _acc_type(dtype: str, t: str) -> str:
    """Sums of floats accumulate in double (the reference does); integer sums in their own type."""
    return "double" if dtype.startswith("float") else t


def _lowest(dtype: str, t: str) -> str:
    return "(-INFINITY)" if dtype.startswith("float") else f"std::numeric_limits<{t}>::lowest()"


#: kept elements per task of a reduction over outer axes: 256 bytes of floats per row read, accumulators in L1
COLUMNS = 64
#: the longest softmax row whose exponentials a task keeps on its stack (32 KiB of floats)
MAX_SOFTMAX_ROW = 8192


@kernel("reduce_sum", "reduce_mean", "reduce_max")
def reduction(layer: Layer, kc: KernelContext) -> list[Node]:
    x = layer.inputs[0]
    axes = sorted({normalize_axis(a, x.rank) for a in layer.attrs["axes"]}) if x.rank else []
    order = kc.layout(x)
    inner = _innermost(x, order)
    if axes and inner is not None and inner not in axes:
        return _columns(layer, kc, axes, order, inner)
    return _rows(layer, kc, axes)


def _innermost(x: Tensor, order: tuple[int, ...]) -> int | None:
    """The dim of ``x`` with unit stride in memory (dims of size 1 have no stride to speak of)."""
    significant = [d for d in order if x.shape[d] != 1]
    return significant[-1] if significant else None


def _out_index(layer: Layer, axes: list[int], kept_vars: dict[int, str]) -> list[str]:
    """The output multi-index: the kept input dims' variables (and 0 for reduced dims under keepdims)."""
    x = layer.inputs[0]
    if layer.attrs.get("keepdims", False):
        return [kept_vars.get(d, "0") for d in range(x.rank)]
    return [kept_vars[d] for d in range(x.rank) if d not in axes]


class _Accumulate:
    """The accumulator type, start value, update and final value of one reduction op."""

    def __init__(self, layer: Layer, axes: list[int]) -> None:
        x, out = layer.inputs[0], layer.outputs[0]
        self.t = ctype_of(out, layer)
        self.is_max = layer.op == "reduce_max"
        self.acc_t = self.t if self.is_max else _acc_type(out.dtype, self.t)
        self.init = _lowest(out.dtype, self.acc_t) if self.is_max else "0"
        self.count = cexpr.mul(*(cexpr.size(x.shape[d]) for d in axes)) if axes else "1"
        self.mean = layer.op == "reduce_mean"

    def update(self, acc: str, value: str) -> str:
        return f"{acc} = sol_max<{self.acc_t}>({acc}, {value});" if self.is_max else f"{acc} += {value};"

    def result(self, acc: str) -> str:
        return f"({self.t})({acc} / (double)({self.count}))" if self.mean else f"({self.t}){acc}"


def _rows(layer: Layer, kc: KernelContext, axes: list[int]) -> list[Node]:
    """Reduced axes innermost in memory: one scalar accumulator per output element, a SIMD reduction loop."""
    x, out = layer.inputs[0], layer.outputs[0]
    a = _Accumulate(layer, axes)
    ovars = index_vars("i", out.rank)
    keep = bool(layer.attrs.get("keepdims", False))
    in_index: list[str] = []
    kept = iter(ovars)  # without keepdims the output dims are the kept input dims, in order
    for d in range(x.rank):
        if d in axes:
            in_index.append(f"r{d}")
        else:
            in_index.append(ovars[d] if keep else next(kept))
    inner: list[Node] = [Stmt(a.update("acc", kc.load(x, in_index)))]
    for pos, d in enumerate(reversed(axes)):
        last = pos == 0 and d == x.rank - 1
        inner = [Loop(f"r{d}", cexpr.size(x.shape[d]), inner, vector=last,
                      reduction=(("max" if a.is_max else "+"), "acc") if last else None)]
    body: list[Node] = [Stmt(f"{a.acc_t} acc = {a.init};"), *inner, Emit(a.result("acc"), tuple(ovars))]
    return nest(ovars, [cexpr.size(s) for s in out.shape], body, vector_last=False)


def _columns(layer: Layer, kc: KernelContext, axes: list[int], order: tuple[int, ...], last: int) -> list[Node]:
    """A kept dim innermost in memory (bias gradients: dy [rows, C] summed over the rows).

    Each task owns `COLUMNS` consecutive elements of that dim (for every other kept index) and
    streams over the reduced indices, adding each contiguous run into a small array of
    accumulators: unit-stride SIMD loads, no scattered scalar sums. Tasks split the kept
    elements, so the order of the additions, and the result, do not depend on the thread count.
    """
    x = layer.inputs[0]
    a = _Accumulate(layer, axes)
    kept = [d for d in order if d not in axes and d != last]  # outer kept dims, in memory order
    names = {d: f"k{d}" for d in [*kept, last]}
    extent = cexpr.size(x.shape[last])
    j = names[last]
    in_index = [names[d] if d not in axes else f"r{d}" for d in range(x.rank)]
    update = Loop(j, "j1", [Stmt(a.update(f"acc[{j} - j0]", kc.load(x, in_index)))], start="j0", vector=True)
    streamed: list[Node] = [update]
    for d in reversed([d for d in order if d in axes]):
        streamed = [Loop(f"r{d}", cexpr.size(x.shape[d]), streamed)]
    out_index = _out_index(layer, axes, names)
    task: list[Node] = [
        Stmt(f"const int64_t j0 = cb * {COLUMNS}, j1 = j0 + {COLUMNS} < {extent} ? j0 + {COLUMNS} : {extent};"),
        Stmt(f"{a.acc_t} acc[{COLUMNS}];"),
        Loop("q", str(COLUMNS), [Stmt(f"acc[q] = {a.init};")], vector=True),
        *streamed,
        Loop(j, "j1", [Emit(a.result(f"acc[{j} - j0]"), tuple(out_index))], start="j0", vector=True),
    ]
    chunks = f"(({extent} + {COLUMNS - 1}) / {COLUMNS})"
    return nest([names[d] for d in kept] + ["cb"], [cexpr.size(x.shape[d]) for d in kept] + [chunks], task,
                vector_last=False)


@kernel("softmax", "log_softmax")
def softmax(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    axis = normalize_axis(int(layer.attrs["axis"]), x.rank)
    outer = [d for d in range(x.rank) if d != axis]
    idx = [f"i{d}" if d != axis else "a" for d in range(x.rank)]
    xa = kc.load(x, idx)
    exp = kc.math("exp")
    extent = cexpr.size(x.shape[axis])
    # The sum in float for float rows, as torch's CPU kernel does: every term is in (0, 1] after the max is
    # subtracted, so float keeps ~1e-7 relative accuracy, and a double sum halved the SIMD width and converted
    # every term (ViT-B/16's 12 x 197 x 197 scores took 0.67 ms per layer with it)
    w = "double" if t == "double" else "float"
    term = f"{exp}(({w}){xa} - mx)"
    # a row that fits a stack buffer keeps its exponentials there: one exp per element instead of two
    row = int(x.shape[axis]) if is_static(x.shape[axis]) and int(x.shape[axis]) <= MAX_SOFTMAX_ROW else None
    if layer.op == "softmax" and row is not None:
        sums = [Stmt(f"alignas(64) {w} ex[{row}];"),
                Loop("a", extent, [Stmt(f"ex[a] = {term};"), Stmt("sum += ex[a];")], vector=True,
                     reduction=("+", "sum"))]
        value, total = f"({t})(ex[a] * inv)", [Stmt(f"const {w} inv = ({w})1 / sum;")]
    else:
        sums = [Loop("a", extent, [Stmt(f"sum += {term};")], vector=True, reduction=("+", "sum"))]
        if layer.op == "softmax":
            value, total = f"({t})({term} * inv)", [Stmt(f"const {w} inv = ({w})1 / sum;")]
        else:
            value, total = f"({t})(({w}){xa} - mx - lsum)", [Stmt(f"const {w} lsum = {kc.math('log')}(sum);")]
    body: list[Node] = [
        Stmt(f"{w} mx = -INFINITY;"),
        Loop("a", extent, [Stmt(f"mx = sol_max<{w}>(mx, ({w}){xa});")], vector=True, reduction=("max", "mx")),
        Stmt(f"{w} sum = 0;"),
        *sums,
        *total,
        Loop("a", extent, [Emit(value, tuple(idx))], vector=True),
    ]
    return nest([f"i{d}" for d in outer], [cexpr.size(x.shape[d]) for d in outer], body, vector_last=False)


def _normalise_rows(layer: Layer, kc: KernelContext, base: str, count: str) -> list[Node]:
    """mean and 1/std of ``count`` contiguous elements at ``base`` (two passes, double accumulators), and the
    two as ``shift``/``scale`` in the output's type: the pass that normalises runs in that type, with twice the
    lanes of double (what PyTorch computes in, too)."""
    t = ctype_of(layer.outputs[0], layer)
    x = kc.ptr(layer.inputs[0])
    eps = cexpr.literal(layer.attrs["eps"], "float64")
    return [
        Stmt(f"const int64_t base = {base};"),
        Stmt("double mean = 0;"),
        Loop("q", count, [Stmt(f"mean += {x}[base + q];")], vector=True, reduction=("+", "mean")),
        Stmt(f"mean /= (double)({count});"),
        Stmt("double var = 0;"),
        Loop("q", count, [Stmt(f"const double dq = {x}[base + q] - mean;"), Stmt("var += dq * dq;")], vector=True,
             reduction=("+", "var")),
        Stmt(f"var /= (double)({count});"),
        Stmt(f"const double rstd = 1.0 / {kc.math('sqrt')}(var + {eps});"),
        Stmt(f"const {t} shift = ({t})mean, scale = ({t})rstd;"),
    ]


@kernel("layer_norm")
def layer_norm(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    k = int(layer.attrs["normalized_ndim"])
    lead = index_vars("i", x.rank - k)
    inner = index_vars("j", k)
    inner_shape = x.shape[x.rank - k:]
    count = cexpr.mul(*(cexpr.size(s) for s in inner_shape)) if k else "1"
    q = cexpr.linear(inner, inner_shape) if k else "0"
    value = f"(({kc.load(x, [*lead, *inner])} - shift) * scale)"
    weight, bias = optional_input(layer, 1), optional_input(layer, 2)
    if weight is not None:
        value = f"({value} * {kc.ptr(weight)}[{q}])"
    if bias is not None:
        value = f"({value} + {kc.ptr(bias)}[{q}])"
    body = _normalise_rows(layer, kc, cexpr.mul(cexpr.linear(lead, x.shape[:x.rank - k]) if lead else "0", count), count)
    body += nest(inner, [cexpr.size(s) for s in inner_shape], [Emit(f"({t}){value}", (*lead, *inner))], parallel=0)
    return nest(lead, [cexpr.size(s) for s in x.shape[:x.rank - k]], body, vector_last=False)


@kernel("group_norm")
def group_norm(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    groups = int(layer.attrs["num_groups"])
    channels = cexpr.static(x.shape[1], f"channels of {layer.name!r}")
    cg = channels // groups
    spatial = x.shape[2:]
    svars = index_vars("s", len(spatial))
    per_group = cexpr.mul(str(cg), *(cexpr.size(s) for s in spatial))
    channel = f"(g * {cg} + c)"
    value = f"(({kc.load(x, ['n', channel, *svars])} - shift) * scale)"
    weight, bias = optional_input(layer, 1), optional_input(layer, 2)
    if weight is not None:
        value = f"({value} * {kc.ptr(weight)}[{channel}])"
    if bias is not None:
        value = f"({value} + {kc.ptr(bias)}[{channel}])"
    body = _normalise_rows(layer, kc, f"(n * {groups} + g) * {per_group}", per_group)
    body += nest(["c", *svars], [str(cg), *(cexpr.size(s) for s in spatial)],
                 [Emit(f"({t}){value}", ("n", channel, *svars))], parallel=0)
    return nest(["n", "g"], [cexpr.size(x.shape[0]), str(groups)], body, vector_last=False)
