"""Gradients of pooling: per (n, c) plane, scatter dy into a zeroed scratch plane, then emit the plane.

Windows overlap; scattering inside one plane is race-free because planes are
the parallel unit. The scratch plane is heap memory (planes can be larger
than a thread's stack).

A flavour with `Flavour.gathers_pool_grads` (a GPU: thousands of threads, a
slow device heap) gets a gather instead: every input element is a task that
inverts the window arithmetic to find the outputs whose window holds it and
sums their shares (a max pool re-finds each such window's maximum). The
shares arrive in the order the scatter adds them, in double, so both forms
give the same bits.

Channels-last tensors (after oneDNN convolutions) get a task per image and
cache line of channels instead: its scratch holds those channels' planes
interleaved like the tensor, so dy, x and the result are walked in memory
order rather than C floats apart.
"""

from __future__ import annotations

from collections.abc import Callable

from ...ir import Layer, Tensor
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt, index_vars, nest
from .base import (
    BLOCK_CHANNEL,
    CHANNEL_BLOCK,
    KernelContext,
    block_width,
    channel_blocks,
    ctype_of,
    is_channels_last,
    kernel,
    spatial_padding,
)
from .pool import dilated_taps


class Frame:
    """How a kernel addresses one task's planes: the leading index variables and the scratch slot of a position."""

    def __init__(self, layer: Layer, kc: KernelContext, *tensors: Tensor) -> None:
        out = layer.outputs[0]
        r = len(_sizes(layer)[1])
        # the inputs decide (the result is written through Emit, in whatever layout it has)
        self.blocked = r == out.rank - 2 and is_channels_last(kc, *tensors)
        if self.blocked:
            self.lead = ["l0", BLOCK_CHANNEL]
            self.slot: Callable[[str], str] = lambda where: f"({where}) * {CHANNEL_BLOCK} + j"
        else:
            self.lead = index_vars("l", out.rank - r)
            self.slot = lambda where: where


def _gathers(kc: KernelContext, frame: Frame) -> bool:
    return kc.flavour.gathers_pool_grads and not frame.blocked


def _gather(layer: Layer, frame: Frame, candidates: list[Node], ins: list[int]) -> list[Node]:
    """Loops: parallel over every element (lead, s0, s1, ..) of the result; ``candidates`` add the shares of the
    outputs that read it into ``acc``."""
    out = layer.outputs[0]
    svars = [f"s{d}" for d in range(len(ins))]
    body: list[Node] = [Stmt("double acc = 0;"), *candidates,
                        Emit(f"({ctype_of(out, layer)})acc", (*frame.lead, *svars))]
    extents = [cexpr.size(s) for s in out.shape[:len(frame.lead)]] + [str(s) for s in ins]
    return nest([*frame.lead, *svars], extents, body, vector_last=False)


def _covering_windows(layer: Layer, outs: list[int], inner: list[Node]) -> list[Node]:
    """Loops over the outputs o{d} whose window holds input position s{d}: o * stride - pad + k * dilation == s for
    a tap k < kernel, i.e. ceil((s + pad - (kernel - 1) * dilation) / stride) <= o <= (s + pad) / stride."""
    bounds: list[Node] = []
    for d in reversed(range(len(outs))):
        k, s, dil, p = _window(layer, d)
        bounds.insert(0, Stmt(f"const int64_t n{d} = s{d} + {p} - {(k - 1) * dil}, lo{d} = n{d} <= 0 ? 0 : "
                              f"(n{d} + {s} - 1) / {s}, hi{d} = sol_min<int64_t>({outs[d]}, (s{d} + {p}) / {s} + 1);"))
        if dil != 1:  # a tap of o's window lands on s only where the offset is a multiple of the dilation
            inner = [Stmt(f"if ((s{d} + {p} - o{d} * {s}) % {dil} != 0) continue;"), *inner]
        inner = [Loop(f"o{d}", f"hi{d}", inner, start=f"lo{d}")]
    return bounds + inner


def _covering_regions(outs: list[int], ins: list[int], inner: list[Node]) -> list[Node]:
    """Loops over the adaptive outputs o{d} whose region [b, e) holds s{d} (o from floor(s * O / I) to
    ceil((s + 1) * O / I), each checked): ``inner`` runs with b{d}, e{d} defined."""
    r = len(ins)
    checked: list[Node] = [*_regions(outs, ins),
                           Stmt("if (" + " || ".join(f"s{d} < b{d} || s{d} >= e{d}" for d in range(r)) + ") continue;"),
                           *inner]
    bounds: list[Node] = []
    for d in reversed(range(r)):
        bounds.insert(0, Stmt(f"const int64_t lo{d} = (s{d} * {outs[d]}) / {ins[d]}, hi{d} = sol_min<int64_t>("
                              f"{outs[d]}, ((s{d} + 1) * {outs[d]} + {ins[d]} - 1) / {ins[d]});"))
        checked = [Loop(f"o{d}", f"hi{d}", checked, start=f"lo{d}")]
    return bounds + checked


def _plane(layer: Layer, kc: KernelContext, frame: Frame, scatter: list[Node], outs: list[int],
           ins: list[int]) -> list[Node]:
    """Loops: parallel over the planes (or channel blocks); scratch; the scatter per output position; emit."""
    out = layer.outputs[0]
    r = len(ins)
    area = cexpr.mul(*(str(s) for s in ins))
    svars = [f"s{d}" for d in range(r)]
    value = f"({ctype_of(out, layer)})buf[{frame.slot(cexpr.linear(svars, ins))}]"
    if frame.blocked:
        scatter = [Loop("j", "width", scatter)]
    per_output: list[Node] = scatter
    for d in reversed(range(r)):
        per_output = [Loop(f"o{d}", str(outs[d]), per_output)]
    if not frame.blocked:
        emit = nest(svars, [str(s) for s in ins], [Emit(value, (*frame.lead, *svars))], parallel=0)
        body: list[Node] = [Stmt(f"double* buf = new double[{area}]();"), *per_output, *emit, Stmt("delete[] buf;")]
        return nest(frame.lead, [cexpr.size(s) for s in out.shape[:len(frame.lead)]], body, vector_last=False)
    emit = nest(svars, [str(s) for s in ins], [Loop("j", "width", [Emit(value, (*frame.lead, *svars))], vector=True)],
                parallel=0, vector_last=False)
    channels = cexpr.size(out.shape[1])
    body = [
        Stmt(f"const int64_t width = {block_width(channels)};"),
        Stmt(f"double* buf = new double[{area} * {CHANNEL_BLOCK}]();"),
        *per_output, *emit, Stmt("delete[] buf;"),
    ]
    return [Loop("l0", cexpr.size(out.shape[0]), [
        Loop("cb", channel_blocks(channels), [Block(body)], parallel=True)], parallel=True)]


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
    t = ctype_of(x, layer)
    frame = Frame(layer, kc, dy, x)
    lvars = frame.lead
    xv = kc.load(x, lvars + [f"h{d}" for d in range(r)])
    where = cexpr.linear([f"h{d}" for d in range(r)], ins)
    dyv = kc.load(dy, lvars + [f"o{d}" for d in range(r)])
    # first maximum; a NaN wins and stays (max_pool propagates NaN)
    update = Stmt(f"{{ const {t} v = {xv}; if (best < 0 || (!(mx != mx) && (v > mx || v != v))) "
                  f"{{ mx = v; best = {where}; }} }}")
    if _gathers(kc, frame):
        here = cexpr.linear([f"s{d}" for d in range(r)], ins)
        found = [Stmt(f"{t} mx = 0; int64_t best = -1;"), *_taps(layer, ins, [update]),
                 Stmt(f"if (best == {here}) acc += {dyv};")]
        return _gather(layer, frame, _covering_windows(layer, outs, found), ins)
    scatter: list[Node] = [
        Stmt(f"{t} mx = 0; int64_t best = -1;"),
        *_taps(layer, ins, [update]),
        Stmt(f"if (best >= 0) buf[{frame.slot('best')}] += {dyv};"),
    ]
    return _plane(layer, kc, frame, scatter, outs, ins)


@kernel("avg_pool_grad")
def avg_pool_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    dy = layer.inputs[0]
    outs, ins = _sizes(layer)
    r = len(ins)
    frame = Frame(layer, kc, dy)
    lvars = frame.lead
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
    if _gathers(kc, frame):
        return _gather(layer, frame, _covering_windows(layer, outs, [*scatter, Stmt("acc += share;")]), ins)
    scatter += _taps(layer, ins, [Stmt(f"buf[{frame.slot(where)}] += share;")])
    return _plane(layer, kc, frame, scatter, outs, ins)


def _regions(outs: list[int], ins: list[int]) -> list[Node]:
    """b{d}, e{d}: the input region [b, e) of adaptive output o{d} (PyTorch's start and end index)."""
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
    frame = Frame(layer, kc, dy)
    lvars = frame.lead
    area = cexpr.mul(*(f"(e{d} - b{d})" for d in range(r)))
    share = Stmt(f"const double share = {kc.load(dy, lvars + [f'o{d}' for d in range(r)])} / (double)({area});")
    if _gathers(kc, frame):
        return _gather(layer, frame, _covering_regions(outs, ins, [share, Stmt("acc += share;")]), ins)
    scatter: list[Node] = [
        *_regions(outs, ins),
        share,
        *_region_loops(ins, [Stmt(f"buf[{frame.slot(cexpr.linear([f'h{d}' for d in range(r)], ins))}] += share;")]),
    ]
    return _plane(layer, kc, frame, scatter, outs, ins)


@kernel("adaptive_max_pool_grad")
def adaptive_max_pool_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    dy, x = layer.inputs
    outs, ins = _sizes(layer)
    r = len(ins)
    t = ctype_of(x, layer)
    frame = Frame(layer, kc, dy, x)
    lvars = frame.lead
    xv = kc.load(x, lvars + [f"h{d}" for d in range(r)])
    where = cexpr.linear([f"h{d}" for d in range(r)], ins)
    update = Stmt(f"{{ const {t} v = {xv}; if (best < 0 || (!(mx != mx) && (v > mx || v != v))) {{ mx = v; best = {where}; }} }}")
    if _gathers(kc, frame):
        here = cexpr.linear([f"s{d}" for d in range(r)], ins)
        found = [Stmt(f"{t} mx = 0; int64_t best = -1;"), *_region_loops(ins, [update]),
                 Stmt(f"if (best == {here}) acc += {kc.load(dy, lvars + [f'o{d}' for d in range(r)])};")]
        return _gather(layer, frame, _covering_regions(outs, ins, found), ins)
    scatter: list[Node] = [
        *_regions(outs, ins),
        Stmt(f"{t} mx = 0; int64_t best = -1;"),
        *_region_loops(ins, [update]),
        Stmt(f"if (best >= 0) buf[{frame.slot('best')}] += {kc.load(dy, lvars + [f'o{d}' for d in range(r)])};"),
    ]
    return _plane(layer, kc, frame, scatter, outs, ins)
