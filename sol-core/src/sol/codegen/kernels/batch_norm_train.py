"""Training batch norm and its gradient: one channel per parallel iteration.

Statistics accumulate in double over the batch and every pixel of the
channel (two passes: mean, then the centred sum of squares), then the
normalised values are emitted, so activations/residual adds after the
forward fuse into its loop.

Channels-last tensors (what oneDNN's convolutions read and write) get their
own nests: a channel's values lie C floats apart there, so walking one
channel at a time would fetch every cache line once per channel. A task owns
a cache line's worth of channels instead and walks the pixels once per pass,
with a SIMD loop over its channels and per-channel accumulators.
"""

from __future__ import annotations

from ...ir import Layer, Tensor
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt, index_vars
from .base import (
    BLOCK_CHANNEL,
    CHANNEL_BLOCK,
    KernelContext,
    block_width,
    channel_blocks,
    ctype_of,
    is_channels_last,
    kernel,
    optional_input,
    split_row,
)


def _over_channel(x_rank: int, sizes: list[str], inner: list[Node], vector: bool = True,
                  reduction: tuple[str, str] | None = None) -> list[Node]:
    """Loops over n and the pixels of one channel (innermost unit-stride in NCHW)."""
    variables = ["n", *index_vars("s", x_rank - 2)]
    body = inner
    for depth in reversed(range(len(variables))):
        last = depth == len(variables) - 1
        body = [Loop(variables[depth], sizes[depth], body, vector=vector and last, reduction=reduction if last else None)]
    return body


def _count(x_shape: tuple) -> str:  # type: ignore[type-arg]
    return cexpr.mul(*(cexpr.size(s) for i, s in enumerate(x_shape) if i != 1))


#: chunks of pixel rows the channels-last passes are split into, so that layers with few channels (16, 24, 32
#: in MobileNet's widest layers) still keep every thread busy; partial sums are combined per channel
ROW_CHUNKS = 16


def _block_index(x: Tensor) -> list[str]:
    return ["n", BLOCK_CHANNEL, *index_vars("s", x.rank - 2)]


def _chunked(x: Tensor, head: list[Node], inner: list[Node], tail: list[Node]) -> Loop:
    """Parallel tasks (row chunk, channel block): ``head``; per pixel of the chunk's rows, ``inner`` for each
    channel ``j`` of the block (SIMD, NHWC's memory order); ``tail``. A row is one (n, s0, ..) of all but the
    last spatial dim; ``count`` (the pixels per channel) and ``width`` (the block's channels) are defined."""
    r = x.rank - 2
    channels = cexpr.size(x.shape[1])
    outer = [x.shape[0], *x.shape[2:-1]]
    names = ["n", *index_vars("s", r - 1)]
    rows = cexpr.mul(*(cexpr.size(s) for s in outer))
    decompose = split_row(names, outer)
    pixels: list[Node] = [Loop(f"s{r - 1}", cexpr.size(x.shape[-1]), [Loop("j", "width", inner, vector=True)])]
    task: list[Node] = [
        Stmt(f"const double count = (double)({_count(x.shape)}); (void)count;"),
        Stmt(f"const int64_t width = {block_width(channels)};"),
        Stmt(f"const int64_t rows = {rows};"),
        Stmt(f"const int64_t r0 = chunk * rows / {ROW_CHUNKS}, r1 = (chunk + 1) * rows / {ROW_CHUNKS};"),
        *head,
        Loop("row", "r1", [*decompose, *pixels], start="r0"),
        *tail,
    ]
    return Loop("chunk", str(ROW_CHUNKS), [Loop("cb", channel_blocks(channels), [Block(task)], parallel=True)],
                parallel=True)


def _partials(x: Tensor, names: tuple[str, str]) -> list[Node]:
    """Store the task's two per-channel sums into its row chunk's slots of ``sol_part``."""
    channels = cexpr.size(x.shape[1])
    slot = f"(chunk * {channels} + {BLOCK_CHANNEL}) * 2"
    return [Loop("j", "width", [Stmt(f"sol_part[{slot}] = {names[0]}[j]; sol_part[{slot} + 1] = {names[1]}[j];")])]


def _combined(x: Tensor) -> list[Node]:
    """Per channel ``c``: the sums ``sa``, ``sb`` of every row chunk's partials."""
    channels = cexpr.size(x.shape[1])
    return [
        Stmt("double sa = 0, sb = 0;"),
        Loop("k", str(ROW_CHUNKS), [Stmt(f"sa += sol_part[(k * {channels} + c) * 2]; "
                                         f"sb += sol_part[(k * {channels} + c) * 2 + 1];")]),
    ]


def _batch_norm_train_channels_last(layer: Layer, kc: KernelContext) -> list[Node]:
    """Two passes over x: shifted sums and sums of squares per (chunk, channel block), then normalise."""
    x = layer.inputs[0]
    t = ctype_of(layer.outputs[0], layer)
    weight, bias = optional_input(layer, 1), optional_input(layer, 2)
    index = _block_index(x)
    first = ["0", "c", *["0"] * (x.rank - 2)]
    xv = kc.load(x, index)
    scale = f" * (double){kc.load(weight, ['c'])}" if weight is not None else ""
    shift = f" + (double){kc.load(bias, ['c'])}" if bias is not None else ""
    eps = cexpr.literal(layer.attrs["eps"], "float64")
    block, channels = CHANNEL_BLOCK, cexpr.size(x.shape[1])
    block_first = ["0", BLOCK_CHANNEL, *["0"] * (x.rank - 2)]
    # sums of x - x[0, c, 0..]: the shift keeps the one-pass variance exact enough (no cancellation of large means)
    statistics = _chunked(x, [
        Stmt(f"double sh[{block}], s[{block}], q[{block}];"),
        Loop("j", "width", [Stmt(f"sh[j] = {kc.load(x, block_first)}; s[j] = 0; q[j] = 0;")]),
    ], [Stmt(f"const double d = (double){xv} - sh[j];"), Stmt("s[j] += d;"), Stmt("q[j] += d * d;")],
        _partials(x, ("s", "q")))
    per_channel = Loop("c", channels, [
        Stmt(f"const double count = (double)({_count(x.shape)});"),
        *_combined(x),
        Stmt("const double m = sa / count;"),
        Stmt(f"const double mean = (double){kc.load(x, first)} + m;"),
        Stmt("const double var = sol_max<double>(sb / count - m * m, 0.0);"),
        *_statistics(t, "mean", "var", eps, scale, kc),
        Stmt(f"sol_coef[c * 2] = a; sol_coef[c * 2 + 1] = -mean * a{shift};"),
    ], parallel=True)
    c = BLOCK_CHANNEL
    normalise = _chunked(x, [], [Emit(f"({t})({xv} * sol_coef[{c} * 2] + sol_coef[{c} * 2 + 1])", tuple(index), 0)], [])
    return [Block([
        Stmt(f"double* sol_part = new double[{ROW_CHUNKS} * {channels} * 2];"),
        Stmt(f"double* sol_coef = new double[{channels} * 2];"),
        statistics, per_channel, normalise,
        Stmt("delete[] sol_part; delete[] sol_coef;"),
    ])]


def _batch_norm_train_grad_channels_last(layer: Layer, kc: KernelContext) -> list[Node]:
    """One pass for the sums of dy and dy * (x - mean) per (chunk, channel block), one for dx."""
    dy, x, mean, invstd = layer.inputs[:4]
    weight = optional_input(layer, 4)
    t = ctype_of(layer.outputs[0], layer)
    index = _block_index(x)
    xv, dyv = kc.load(x, index), kc.load(dy, index)
    w = f" * (double){kc.load(weight, ['c'])}" if weight is not None else ""
    block, channels = CHANNEL_BLOCK, cexpr.size(x.shape[1])
    c = BLOCK_CHANNEL
    sums = _chunked(x, [
        Stmt(f"double mu[{block}], sdy[{block}], sdyx[{block}];"),
        Loop("j", "width", [Stmt(f"mu[j] = {kc.load(mean, [c])}; sdy[j] = 0; sdyx[j] = 0;")]),
    ], [Stmt(f"const double g = {dyv};"), Stmt("sdy[j] += g;"), Stmt(f"sdyx[j] += g * ((double){xv} - mu[j]);")],
        _partials(x, ("sdy", "sdyx")))
    per_channel = Loop("c", channels, [
        Stmt(f"const double count = (double)({_count(x.shape)});"),
        *_combined(x),
        Stmt(f"const double rs = {kc.load(invstd, ['c'])};"),
        Stmt("const double dweight = sb * rs;"),
        Emit(f"({t})dweight", ("c",), 1),
        Emit(f"({t})sa", ("c",), 2),
        Stmt(f"sol_coef[c * 3] = rs{w} / count; sol_coef[c * 3 + 1] = sa; sol_coef[c * 3 + 2] = dweight * rs;"),
    ], parallel=True)
    gradient = _chunked(x, [
        Stmt(f"double mu[{block}];"),
        Loop("j", "width", [Stmt(f"mu[j] = {kc.load(mean, [c])};")]),
    ], [Emit(f"({t})(sol_coef[{c} * 3] * (count * (double){dyv} - sol_coef[{c} * 3 + 1] - ((double){xv} - mu[j]) "
             f"* sol_coef[{c} * 3 + 2]))", tuple(index), 0)], [])
    return [Block([
        Stmt(f"double* sol_part = new double[{ROW_CHUNKS} * {channels} * 2];"),
        Stmt(f"double* sol_coef = new double[{channels} * 3];"),
        sums, per_channel, gradient,
        Stmt("delete[] sol_part; delete[] sol_coef;"),
    ])]


def _statistics(t: str, mean: str, variance: str, eps: str, scale: str, kc: KernelContext) -> list[Node]:
    """Outputs 1-3 of channel ``c`` (mean, invstd, unbiased variance) from the biased ``variance``, and ``a``:
    the factor x is multiplied with (invstd, times the weight when there is one)."""
    return [
        Stmt(f"const double invstd = 1.0 / {kc.math('sqrt')}({variance} + {eps});"),
        Emit(f"({t}){mean}", ("c",), 1),
        Emit(f"({t})invstd", ("c",), 2),
        Emit(f"({t})(count > 1 ? {variance} * count / (count - 1) : {variance})", ("c",), 3),
        Stmt(f"const double a = invstd{scale};"),
    ]


@kernel("batch_norm_train")
def batch_norm_train(layer: Layer, kc: KernelContext) -> list[Node]:
    x = layer.inputs[0]
    y = layer.outputs[0]
    if is_channels_last(kc, x):
        return _batch_norm_train_channels_last(layer, kc)
    t = ctype_of(y, layer)
    weight, bias = optional_input(layer, 1), optional_input(layer, 2)
    sizes = [cexpr.size(s) for i, s in enumerate(x.shape) if i != 1]
    index = ["n", "c", *index_vars("s", x.rank - 2)]
    xv = kc.load(x, index)
    eps = cexpr.literal(layer.attrs["eps"], "float64")
    scale = f" * (double){kc.load(weight, ['c'])}" if weight is not None else ""
    shift = f" + (double){kc.load(bias, ['c'])}" if bias is not None else ""
    body: list[Node] = [
        Stmt(f"const double count = (double)({_count(x.shape)});"),
        Stmt("double sum = 0;"),
        *_over_channel(x.rank, sizes, [Stmt(f"sum += {xv};")], reduction=("+", "sum")),
        Stmt("const double mean = sum / count;"),
        Stmt("double sq = 0;"),
        *_over_channel(x.rank, sizes, [Stmt(f"const double dv = {xv} - mean;"), Stmt("sq += dv * dv;")],
                       reduction=("+", "sq")),
        Stmt("const double var = sq / count;"),
        *_statistics(t, "mean", "var", eps, scale, kc),
        Stmt(f"const double bshift = -mean * a{shift};"),
        *_over_channel(x.rank, sizes, [Emit(f"({t})({xv} * a + bshift)", tuple(index), 0)]),
    ]
    return [Loop("c", cexpr.size(x.shape[1]), body, parallel=True)]


@kernel("batch_norm_train_grad")
def batch_norm_train_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    dy, x, mean, invstd = layer.inputs[:4]
    if is_channels_last(kc, dy, x):
        return _batch_norm_train_grad_channels_last(layer, kc)
    weight = optional_input(layer, 4)
    t = ctype_of(layer.outputs[0], layer)
    sizes = [cexpr.size(s) for i, s in enumerate(x.shape) if i != 1]
    index = ["n", "c", *index_vars("s", x.rank - 2)]
    xv, dyv = kc.load(x, index), kc.load(dy, index)
    w = f" * (double){kc.load(weight, ['c'])}" if weight is not None else ""
    body: list[Node] = [
        Stmt(f"const double count = (double)({_count(x.shape)});"),
        Stmt(f"const double mu = {kc.load(mean, ['c'])}, rs = {kc.load(invstd, ['c'])};"),
        Stmt("double sdy = 0, sdyx = 0;"),
        *_over_channel(x.rank, sizes, [Stmt(f"const double g = {dyv};"), Stmt("sdy += g;"),
                                       Stmt(f"sdyx += g * ((double){xv} - mu);")], reduction=("+", "sdy, sdyx")),
        Stmt("const double dweight = sdyx * rs;"),
        Emit(f"({t})dweight", ("c",), 1),
        Emit(f"({t})sdy", ("c",), 2),
        Stmt(f"const double k = rs{w} / count;"),
        Stmt("const double kx = dweight * rs;"),
        *_over_channel(x.rank, sizes, [
            Emit(f"({t})(k * (count * (double){dyv} - sdy - ((double){xv} - mu) * kx))", tuple(index), 0)]),
    ]
    return [Loop("c", cexpr.size(x.shape[1]), body, parallel=True)]
