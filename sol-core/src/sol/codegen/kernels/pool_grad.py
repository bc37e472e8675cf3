"""Gradients of pooling: per (n, c) plane, scatter dy into a zeroed scratch plane, then emit the plane.

Windows overlap, so a gather per input element would need the inverse of
the window arithmetic; scattering inside one plane is race-free because
planes are the parallel unit. The scratch plane is heap memory (planes can
be larger than a thread's stack).
"""

from __future__ import annotations

from ...ir import Layer
from .. import cexpr
from ..nest import Emit, Loop, Node, Stmt, index_vars, nest
from .base import KernelContext, ctype_of, kernel, spatial_padding
from .pool import dilated_taps


def _plane(layer: Layer, kc: KernelContext, scatter: list[Node], outs: list[int], ins: list[int]) -> list[Node]:
    """Loops: parallel over the leading dims; scratch; the scatter per output position; emit."""
    out = layer.outputs[0]
    r = len(ins)
    lead = out.rank - r
    lvars = index_vars("l", lead)
    area = cexpr.mul(*(str(s) for s in ins))
    per_output: list[Node] = scatter
    for d in reversed(range(r)):
        per_output = [Loop(f"o{d}", str(outs[d]), per_output)]
    svars = [f"s{d}" for d in range(r)]
    emit = nest(svars, [str(s) for s in ins],
                [Emit(f"({ctype_of(out, layer)})buf[{cexpr.linear(svars, ins)}]", (*lvars, *svars))], parallel=0)
    body: list[Node] = [Stmt(f"double* buf = new double[{area}]();"), *per_output, *emit, Stmt("delete[] buf;")]
    return nest(lvars, [cexpr.size(s) for s in out.shape[:lead]], body, vector_last=False)


def _sizes(layer: Layer) -> tuple[list[int], list[int]]:
    dy, out = layer.inputs[0], layer.outputs[0]
    r = len(layer.attrs["kernel"]) if "kernel" in layer.attrs else len(layer.attrs["output_size"])
    ins = [cexpr.static(s, f"spatial size of {layer.name!r}") for s in out.shape[out.rank - r:]]
    outs = [cexpr.static(s, f"pooled size of {layer.name!r}") for s in dy.shape[dy.rank - r:]]
    return outs, ins


def _window(layer: Layer, d: int) -> tuple[int, int, int, int]:
    kernel_sizes = [int(k) for k in layer.attrs["kernel"]]
    r = len(kernel_sizes)
    stride = [int(s) for s in (layer.attrs.get("stride") or kernel_sizes)]
    dilation = [int(v) for v in (layer.attrs.get("dilation") or [1] * r)]
    pads = [b for b, _ in spatial_padding(layer.attrs.get("padding", 0), r)]
    return kernel_sizes[d], stride[d], dilation[d], pads[d]


def _taps(layer: Layer, ins: list[int], inner: list[Node]) -> list[Node]:
    """Loops over the window taps of output (o0, o1, ...) inside the input: h{d} is the input position."""
    r = len(ins)
    for d in reversed(range(r)):
        k, s, dil, p = _window(layer, d)
        check = Stmt(f"const int64_t h{d} = o{d} * {s} - {p} + k{d} * {dil}; if (h{d} < 0 || h{d} >= {ins[d]}) continue;")
        inner = [Loop(f"k{d}", str(k), [check, *inner])]
    return inner


@kernel("max_pool_grad")
def max_pool_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    dy, x = layer.inputs
    outs, ins = _sizes(layer)
    r = len(ins)
    lead = x.rank - r
    t = ctype_of(x, layer)
    lvars = [f"l{i}" for i in range(lead)]
    xv = kc.load(x, lvars + [f"h{d}" for d in range(r)])
    where = cexpr.linear([f"h{d}" for d in range(r)], ins)
    # first maximum; a NaN wins and stays (max_pool propagates NaN)
    update = Stmt(f"{{ const {t} v = {xv}; if (best < 0 || (!(mx != mx) && (v > mx || v != v))) {{ mx = v; best = {where}; }} }}")
    scatter: list[Node] = [
        Stmt(f"{t} mx = 0; int64_t best = -1;"),
        *_taps(layer, ins, [update]),
        Stmt(f"if (best >= 0) buf[best] += {kc.load(dy, lvars + [f'o{d}' for d in range(r)])};"),
    ]
    return _plane(layer, kc, scatter, outs, ins)


@kernel("avg_pool_grad")
def avg_pool_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    dy = layer.inputs[0]
    outs, ins = _sizes(layer)
    r = len(ins)
    lead = dy.rank - r
    lvars = [f"l{i}" for i in range(lead)]
    where = cexpr.linear([f"h{d}" for d in range(r)], ins)
    scatter: list[Node] = []
    if layer.attrs.get("divisor_override"):
        scatter.append(Stmt(f"const double cnt = {float(layer.attrs['divisor_override'])!r};"))
    else:
        include = bool(layer.attrs.get("count_include_pad", True))
        scatter.append(Stmt("double cnt = 1;"))
        for d in range(r):
            k, s, dil, p = _window(layer, d)
            lo, hi = (f"-{p}", f"{ins[d]} + {p}") if include else ("0", str(ins[d]))
            start = f"o{d} * {s} - {p}"
            if dil != 1:
                scatter.append(Stmt(f"cnt *= (double){dilated_taps(start, k, dil, lo, hi)};"))
                continue
            scatter.append(Stmt(f"cnt *= (double)sol_max<int64_t>(0, sol_min<int64_t>({start} + {k}, {hi}) "
                                f"- sol_max<int64_t>({start}, {lo}));"))
    scatter.append(Stmt(f"const double share = {kc.load(dy, lvars + [f'o{d}' for d in range(r)])} / cnt;"))
    scatter += _taps(layer, ins, [Stmt(f"buf[{where}] += share;")])
    return _plane(layer, kc, scatter, outs, ins)


def _regions(layer: Layer, outs: list[int], ins: list[int]) -> list[Node]:
    return [Stmt(f"const int64_t b{d} = (o{d} * {ins[d]}) / {outs[d]}, e{d} = ((o{d} + 1) * {ins[d]} + {outs[d]} - 1) / {outs[d]};")
            for d in range(len(ins))]


def _region_loops(ins: list[int], inner: list[Node]) -> list[Node]:
    for d in reversed(range(len(ins))):
        inner = [Loop(f"h{d}", f"e{d}", inner, start=f"b{d}")]
    return inner


@kernel("adaptive_avg_pool_grad")
def adaptive_avg_pool_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    dy = layer.inputs[0]
    outs, ins = _sizes(layer)
    r = len(ins)
    lvars = [f"l{i}" for i in range(dy.rank - r)]
    area = cexpr.mul(*(f"(e{d} - b{d})" for d in range(r)))
    scatter: list[Node] = [
        *_regions(layer, outs, ins),
        Stmt(f"const double share = {kc.load(dy, lvars + [f'o{d}' for d in range(r)])} / (double)({area});"),
        *_region_loops(ins, [Stmt(f"buf[{cexpr.linear([f'h{d}' for d in range(r)], ins)}] += share;")]),
    ]
    return _plane(layer, kc, scatter, outs, ins)


@kernel("adaptive_max_pool_grad")
def adaptive_max_pool_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    dy, x = layer.inputs
    outs, ins = _sizes(layer)
    r = len(ins)
    t = ctype_of(x, layer)
    lvars = [f"l{i}" for i in range(x.rank - r)]
    xv = kc.load(x, lvars + [f"h{d}" for d in range(r)])
    where = cexpr.linear([f"h{d}" for d in range(r)], ins)
    update = Stmt(f"{{ const {t} v = {xv}; if (best < 0 || (!(mx != mx) && (v > mx || v != v))) {{ mx = v; best = {where}; }} }}")
    scatter: list[Node] = [
        *_regions(layer, outs, ins),
        Stmt(f"{t} mx = 0; int64_t best = -1;"),
        *_region_loops(ins, [update]),
        Stmt(f"if (best >= 0) buf[best] += {kc.load(dy, lvars + [f'o{d}' for d in range(r)])};"),
    ]
    return _plane(layer, kc, scatter, outs, ins)
