"""Pooling over the trailing spatial dims: a window loop per output element, clipped to the input."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir import Layer, is_static
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt, index_vars, nest, nest_in_order
from .base import (
    BLOCK_CHANNEL,
    CHANNEL_BLOCK,
    KernelContext,
    block_width,
    channel_blocks,
    ctype_of,
    kernel,
    spatial_padding,
    split_row,
)


def _lowest(dtype: str, t: str) -> str:
    return "(-INFINITY)" if dtype.startswith("float") else f"std::numeric_limits<{t}>::lowest()"


def _window_acc_type(t: str, is_max: bool) -> str:
    """The accumulator of a windowed pool. A float average sums a few taps (9 for 3x3) in float, as PyTorch's
    own CPU kernels do: a double accumulator halves the SIMD width and adds two conversions per tap
    (light_inception_v2 1.018x in paired rounds with float). Other types sum in double."""
    return t if is_max or t == "float" else "double"


@dataclass(frozen=True)
class _Window:
    """A pool's window over its trailing spatial dims: sizes, strides, dilations and leading pads."""

    kernel: list[int]
    stride: list[int]
    dilation: list[int]
    pads: list[int]

    @staticmethod
    def of(layer: Layer) -> _Window:
        kernel = [int(k) for k in layer.attrs["kernel"]]
        r = len(kernel)
        return _Window(kernel, [int(s) for s in (layer.attrs.get("stride") or kernel)],
                       [int(d) for d in (layer.attrs.get("dilation") or [1] * r)],
                       [b for b, _ in spatial_padding(layer.attrs.get("padding", 0), r)])


def _counts_taps(layer: Layer) -> bool:
    """Whether the window's value divides by ``cnt``, its taps inside the input (`_divisor` computes it)."""
    return layer.op == "avg_pool" and not layer.attrs.get("divisor_override")


def _result(layer: Layer, acc: str, t: str, acc_t: str) -> str:
    """The output value of a window from its accumulator ``acc``: the max, or the sum over the divisor."""
    if layer.op == "max_pool":
        return acc
    if layer.attrs.get("divisor_override"):
        return f"({t})({acc} / ({acc_t}){float(layer.attrs['divisor_override'])!r})"
    return f"({t})({acc} / ({acc_t})cnt)"


@kernel("max_pool", "avg_pool")
def pool(layer: Layer, kc: KernelContext) -> list[Node]:
    x, out = layer.inputs[0], layer.outputs[0]
    window = _Window.of(layer)
    r = len(window.kernel)
    lead = x.rank - r
    if lead == 2 and kc.layout(out) == kc.layout(x) == (0, *range(2, x.rank), 1):
        return _pool_channels_last(layer, kc)
    if _planar_fits(layer, kc):
        return _pool_planar(layer, kc)
    # the generic loop: every tap of every output tested against the input's bounds
    t = ctype_of(out, layer)
    kernel_sizes, stride, dilation, pads = window.kernel, window.stride, window.dilation, window.pads
    ovars = index_vars("i", out.rank)
    ins = [cexpr.size(s) for s in x.shape[lead:]]
    is_max = layer.op == "max_pool"
    acc_t = _window_acc_type(t, is_max)
    in_index = ovars[:lead] + [f"h{d}" for d in range(r)]
    xv = kc.load(x, in_index)
    inner: list[Node] = [Stmt(f"acc = sol_max<{t}>(acc, {xv});" if is_max else f"acc += {xv};")]
    for d in reversed(range(r)):
        check = Stmt(f"const int64_t h{d} = {ovars[lead + d]} * {stride[d]} - {pads[d]} + k{d} * {dilation[d]}; "
                     f"if (h{d} < 0 || h{d} >= {ins[d]}) continue;")
        inner = [Loop(f"k{d}", str(kernel_sizes[d]), [check, *inner])]
    body: list[Node] = [Stmt(f"{acc_t} acc = {_lowest(out.dtype, t) if is_max else '0'};"), *inner]
    if _counts_taps(layer):
        body += _divisor(layer, kernel_sizes, stride, pads, ins, ovars[lead:], dilation)
    body.append(Emit(_result(layer, "acc", t, acc_t), tuple(ovars)))
    return nest_in_order(ovars, [cexpr.size(s) for s in out.shape], body, kc.layout(out), vector_last=False)


def _divisor(layer: Layer, kernel_sizes: list[int], stride: list[int], pads: list[int], ins: list[str],
             positions: list[str], dilation: list[int] | None = None) -> list[Node]:
    """``cnt``: PyTorch's avg_pool divisor at one output position.

    Window taps inside the input (or inside input+padding with count_include_pad); the extra right
    padding of ceil_mode never counts.
    """
    include = bool(layer.attrs.get("count_include_pad", True))
    body: list[Node] = [Stmt("int64_t cnt = 1;")]
    for d, o in enumerate(positions):
        lo, hi = (f"-{pads[d]}", f"{ins[d]} + {pads[d]}") if include else ("0", ins[d])
        start = f"{o} * {stride[d]} - {pads[d]}"
        if dilation and dilation[d] != 1:
            body.append(Stmt(f"cnt *= {dilated_taps(start, kernel_sizes[d], dilation[d], lo, hi)};"))
            continue
        body.append(Stmt(f"cnt *= sol_max<int64_t>(0, sol_min<int64_t>({start} + {kernel_sizes[d]}, {hi}) "
                         f"- sol_max<int64_t>({start}, {lo}));"))
    return body


def dilated_taps(start: str, kernel: int, dilation: int, lo: str, hi: str) -> str:
    """How many taps ``start + k * dilation`` (k < kernel) lie in [lo, hi): a C expression."""
    def first_at_or_after(bound: str) -> str:  # the first k with start + k * dilation >= bound
        return f"(({bound}) > ({start}) ? (({bound}) - ({start}) + {dilation - 1}) / {dilation} : 0)"
    return (f"sol_max<int64_t>(0, sol_min<int64_t>({kernel}, {first_at_or_after(hi)}) "
            f"- sol_min<int64_t>({kernel}, {first_at_or_after(lo)}))")


def _pool_channels_last(layer: Layer, kc: KernelContext) -> list[Node]:
    """Channels-last pooling: per output pixel, the window taps outside and a SIMD loop over the channels inside."""
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    window = _Window.of(layer)
    kernel_sizes, stride, dilation, pads = window.kernel, window.stride, window.dilation, window.pads
    r = len(kernel_sizes)
    channels = cexpr.static(x.shape[1], f"channels of {layer.name!r}")
    ins = [cexpr.size(s) for s in x.shape[2:]]
    positions = [f"o{d}" for d in range(r)]
    is_max = layer.op == "max_pool"
    acc_t = _window_acc_type(t, is_max)
    xv = kc.load(x, ["n", "c", *[f"h{d}" for d in range(r)]])
    update = f"acc[c] = sol_max<{t}>(acc[c], {xv});" if is_max else f"acc[c] += {xv};"
    inner: list[Node] = [Loop("c", str(channels), [Stmt(update)], vector=True)]
    bounds: list[Node] = []
    for d in reversed(range(r)):
        start = f"o{d} * {stride[d]} - {pads[d]}"
        if dilation[d] == 1:
            # the taps inside the input, computed once per window: no test per tap (Inception's 3x3 average
            # pools over 192 channels: 23.9 -> 18.3 us in a C++ loop of the same code)
            bounds.insert(0, Stmt(f"const int64_t b{d} = sol_max<int64_t>({start}, 0), "
                                  f"e{d} = sol_min<int64_t>({start} + {kernel_sizes[d]}, {ins[d]});"))
            inner = [Loop(f"h{d}", f"e{d}", inner, start=f"b{d}")]
            continue
        check = Stmt(f"const int64_t h{d} = {start} + k{d} * {dilation[d]}; "
                     f"if (h{d} < 0 || h{d} >= {ins[d]}) continue;")
        inner = [Loop(f"k{d}", str(kernel_sizes[d]), [check, *inner])]
    init = _lowest(out.dtype, t) if is_max else "0"
    body: list[Node] = [*bounds, Stmt(f"alignas(64) {acc_t} acc[{channels}];"),
                        Loop("c", str(channels), [Stmt(f"acc[c] = {init};")], vector=True), *inner]
    if _counts_taps(layer):
        body += _divisor(layer, kernel_sizes, stride, pads, ins, positions, dilation)
    body.append(Loop("c", str(channels), [Emit(_result(layer, "acc[c]", t, acc_t), ("n", "c", *positions))],
                     vector=True))
    return nest(["n", *positions], [cexpr.size(out.shape[0]), *(cexpr.size(s) for s in out.shape[2:])], [Block(body)],
                vector_last=False)


def _planar_fits(layer: Layer, kc: KernelContext) -> bool:
    """Row-major input and output, no dilation, and static spatial sizes (the row buffer's length)."""
    x, out = layer.inputs[0], layer.outputs[0]
    r = len(layer.attrs["kernel"])
    return (x.rank > r and kc.layout(x) == tuple(range(x.rank)) and kc.layout(out) == tuple(range(out.rank))
            and all(d == 1 for d in _Window.of(layer).dilation)
            and all(isinstance(s, int) for s in (*x.shape[-r:], *out.shape[-r:])))


def _pool_planar(layer: Layer, kc: KernelContext) -> list[Node]:
    """Row-major (NCHW) pooling, one task per output row.

    The window's rows are clipped to the input once per output row. The row's interior pixels, whose taps all
    lie inside the input, are accumulated in a row buffer by one SIMD loop over the pixels per window row (that
    row's taps in one expression); only the few border pixels clip their windows one by one. The generic loop
    tests every tap of every output: resnet18's 3x3 stride-2 max pool over 64 x 112 x 112 took 2.0 ms there
    (PyTorch's NCHW kernel: 2.3 ms).
    """
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    window = _Window.of(layer)
    kernel_sizes, stride, pads = window.kernel, window.stride, window.pads
    r = len(kernel_sizes)
    lead = x.rank - r
    ins = [int(s) for s in x.shape[lead:]]
    is_max = layer.op == "max_pool"
    acc_t = _window_acc_type(t, is_max)
    init = _lowest(out.dtype, t) if is_max else "0"
    ovars = index_vars("i", out.rank)
    o, last = ovars[-1], r - 1
    width, taps, step, pad = int(out.shape[-1]), kernel_sizes[last], stride[last], pads[last]
    # [lo, hi): the output pixels of a row whose taps all lie inside the input row
    lo = min(width, -(-pad // step))
    hi = max(lo, min(width, (ins[last] - taps + pad) // step + 1)) if ins[last] - taps + pad >= 0 else lo
    starts = [f"{ovars[lead + d]} * {stride[d]} - {pads[d]}" for d in range(r)]

    def clipped(d: int) -> Stmt:
        return Stmt(f"const int64_t b{d} = sol_max<int64_t>({starts[d]}, 0), "
                    f"e{d} = sol_min<int64_t>({starts[d]} + {kernel_sizes[d]}, {ins[d]});")

    def over_rows(inner: list[Node]) -> list[Node]:  # the window's rows (all spatial dims but the last)
        for d in reversed(range(last)):
            inner = [Loop(f"h{d}", f"e{d}", inner, start=f"b{d}")]
        return inner

    divisor = _divisor(layer, kernel_sizes, stride, pads, [str(n) for n in ins], ovars[lead:]) \
        if _counts_taps(layer) else []

    def border_pixels(start: str, stop: str) -> Loop:  # one pixel at a time, its window clipped on every dim
        xv = kc.load(x, [*ovars[:lead], *[f"h{d}" for d in range(r)]])
        update = f"acc = sol_max<{t}>(acc, {xv});" if is_max else f"acc += {xv};"
        taps_in_row = Loop(f"h{last}", f"e{last}", [Stmt(update)], start=f"b{last}")
        body = [clipped(last), Stmt(f"{acc_t} acc = {init};"), *over_rows([taps_in_row]), *divisor,
                Emit(_result(layer, "acc", t, acc_t), tuple(ovars))]
        return Loop(o, stop, body, start=start)

    # one pass over the row buffer per window row, all taps of the row in one expression (in tap order)
    combined = f"row[{o}]"
    for k in range(taps):
        xv = kc.load(x, [*ovars[:lead], *[f"h{d}" for d in range(last)], f"{o} * {step} - {pad} + {k}"])
        combined = f"sol_max<{t}>({combined}, {xv})" if is_max else f"{combined} + {xv}"
    interior = [
        Stmt(f"alignas(64) {acc_t} row[{width}];"),
        Loop(o, str(hi), [Stmt(f"row[{o}] = {init};")], start=str(lo), vector=True),
        *over_rows([Loop(o, str(hi), [Stmt(f"row[{o}] = {combined};")], start=str(lo), vector=True)]),
        Loop(o, str(hi), [*divisor, Emit(_result(layer, f"row[{o}]", t, acc_t), tuple(ovars))], start=str(lo), vector=True),
    ]
    body: list[Node] = [*[clipped(d) for d in range(last)],
                        *([border_pixels("0", str(lo))] if lo > 0 else []), *(interior if hi > lo else []),
                        *([border_pixels(str(hi), str(width))] if hi < width else [])]
    return nest(ovars[:-1], [cexpr.size(s) for s in out.shape[:-1]], [Block(body)], vector_last=False)


@kernel("adaptive_avg_pool", "adaptive_max_pool")
def adaptive_pool(layer: Layer, kc: KernelContext) -> list[Node]:
    """Region of output o along an axis of size I: [floor(o*I/O), ceil((o+1)*I/O))."""
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    r = len(layer.attrs["output_size"])
    lead = x.rank - r
    ovars = index_vars("i", out.rank)
    is_max = layer.op == "adaptive_max_pool"
    acc_t = t if is_max else "double"
    if lead == 2 and all(s == 1 for s in out.shape[lead:]) and kc.layout(x) == (0, *range(2, x.rank), 1):
        return _global_pool_channels_last(layer, kc)
    xv = kc.load(x, ovars[:lead] + [f"h{d}" for d in range(r)])
    inner: list[Node] = [Stmt(f"acc = sol_max<{t}>(acc, {xv});" if is_max else f"acc += {xv};")]
    bounds: list[Node] = []
    for d in reversed(range(r)):
        size_in, size_out, o = cexpr.size(x.shape[lead + d]), cexpr.size(out.shape[lead + d]), ovars[lead + d]
        bounds.insert(0, Stmt(f"const int64_t b{d} = ({o} * {size_in}) / {size_out}, "
                              f"e{d} = (({o} + 1) * {size_in} + {size_out} - 1) / {size_out};"))
        inner = [Loop(f"h{d}", f"e{d}", inner, start=f"b{d}")]
    count = cexpr.mul(*(f"(e{d} - b{d})" for d in range(r)))
    value = "acc" if is_max else f"({t})(acc / (double)({count}))"
    body: list[Node] = [*bounds, Stmt(f"{acc_t} acc = {_lowest(out.dtype, t) if is_max else '0'};"), *inner,
                        Emit(value, tuple(ovars))]
    return nest(ovars, [cexpr.size(s) for s in out.shape], body, vector_last=False)


#: chunks of pixel rows a large global pool's image is split into: tasks are (image, row chunk, channel block), so a
#: thread reads the rows its core's producer wrote (a 2-core split of the rows), and each image's partial results
#: per chunk are combined per channel afterwards
GLOBAL_POOL_ROW_CHUNKS = 16
#: rows per chunk at least: a smaller image (7x7, 14x14 at 3 chunks) is not worth partial results; resnet50's final
#: 7x7x2048 pool took 31-35 us in 7 chunks against 13-14 us split by channels alone
GLOBAL_POOL_CHUNK_ROWS = 4


def _global_pool_channels_last(layer: Layer, kc: KernelContext) -> list[Node]:
    """Global pooling of an NHWC tensor (squeeze-excitation, classifier heads).

    The generic nest reduces one channel at a time, striding by C through the
    whole image: every cache line is fetched once per channel. Here a task
    owns a cache line's worth of channels and walks its pixels once, with a
    SIMD loop over its channels. On large images a task covers a chunk of
    pixel rows, and a second loop combines the chunks' partial results per
    channel.

    Split by channels alone, every thread walked all the rows: efficientnet_b0's
    squeeze-excitation pools read half their input from the other core's cache
    (0.43 ms for its 17 pools in bf16, 10-15 GB/s; 56x56x144: 88-108 us; 0.24 ms
    and 40 us split by rows).
    """
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    is_max = layer.op == "adaptive_max_pool"
    acc_t = t if is_max else "double"
    r = x.rank - 2
    channels, block, batch = cexpr.size(x.shape[1]), CHANNEL_BLOCK, cexpr.size(x.shape[0])
    spatial = index_vars("s", r)
    rows = cexpr.mul(*(cexpr.size(s) for s in x.shape[2:-1]))
    chunks = GLOBAL_POOL_ROW_CHUNKS
    if all(is_static(s) for s in x.shape[2:-1]):
        chunks = min(chunks, math.prod(x.shape[2:-1]) // GLOBAL_POOL_CHUNK_ROWS)  # type: ignore[arg-type]
    decompose = split_row(spatial[:-1], x.shape[2:-1])
    xv = kc.load(x, ["n", BLOCK_CHANNEL, *spatial])
    start = _lowest(out.dtype, t) if is_max else "0"
    count = cexpr.mul(*(cexpr.size(s) for s in x.shape[2:]))

    def combine(acc: str, value: str) -> Stmt:
        return Stmt(f"{acc} = sol_max<{t}>({acc}, {value});" if is_max else f"{acc} += {value};")

    def result(acc: str) -> str:
        return acc if is_max else f"({t})({acc} / (double)({count}))"

    def task(first_row: str, end_row: str, finish: Node) -> list[Node]:
        """A block of channels over rows [first_row, end_row): ``finish`` per channel j of the block."""
        return [Block([
            Stmt(f"const int64_t width = {block_width(channels)};"),
            Stmt(f"{acc_t} acc[{block}];"),
            Loop("j", str(block), [Stmt(f"acc[j] = {start};")], vector=True),
            Loop("row", end_row, [*decompose, Loop(spatial[-1], cexpr.size(x.shape[-1]), [
                Loop("j", "width", [combine("acc[j]", xv)], vector=True)])], start=first_row),
            Loop("j", "width", [finish]),
        ])]

    if chunks <= 1:
        return [Loop("n", batch, [Loop("cb", channel_blocks(channels), task(
            "0", rows, Emit(result("acc[j]"), ("n", BLOCK_CHANNEL, *["0"] * r))), parallel=True)], parallel=True)]
    part = f"sol_part[(n * {chunks} + chunk) * {channels} + {BLOCK_CHANNEL}]"
    chunked = task(f"chunk * {rows} / {chunks}", f"(chunk + 1) * {rows} / {chunks}", Stmt(f"{part} = acc[j];"))
    partials = Loop("n", batch, [Loop("chunk", str(chunks), [
        Loop("cb", channel_blocks(channels), chunked, parallel=True)], parallel=True)], parallel=True)
    combined = Loop("n", batch, [Loop("c", channels, [
        Stmt(f"{acc_t} acc = {start};"),
        Loop("k", str(chunks), [combine("acc", f"sol_part[(n * {chunks} + k) * {channels} + c]")]),
        Emit(result("acc"), ("n", "c", *["0"] * r)),
    ], parallel=True)], parallel=True)
    return [Block([
        Stmt(f"{acc_t}* sol_part = new {acc_t}[{batch} * {chunks} * {channels}];"),
        partials, combined,
        Stmt("delete[] sol_part;"),
    ])]
