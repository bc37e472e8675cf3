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
from ..layout import channels_last
from ..nest import Block, Emit, Loop, Node, Stmt, index_vars
from .base import KernelContext, ctype_of, kernel, optional_input


def _over_channel(x_rank: int, sizes: list[str], inner: list[Node], vector: bool = True,
                  reduction: tuple[str, str] | None = None) -> list[Node]:
    """Loops over n and the pixels of one channel (innermost unit-stride in NCHW)."""
    variables = ["n", *index_vars("s", x_rank - 2)]
    body = inner
    for depth in reversed(range(len(variables))):
        last = depth == len(variables) - 1
        body = [Loop(variables[depth], sizes[depth], body, vector=vector and last, reduction=reduction if last else None)]
    return body


def _count(layer: Layer, x_shape: tuple) -> str:  # type: ignore[type-arg]
    return cexpr.mul(*(cexpr.size(s) for i, s in enumerate(x_shape) if i != 1))


#: channels per task of the channels-last nests: one 64-byte cache line of floats
CHANNEL_BLOCK = 16


def _is_channels_last(kc: KernelContext, *tensors: Tensor) -> bool:
    return all(t.rank >= 3 and kc.layout(t) == channels_last(t.rank) for t in tensors)


def _over_pixels(x_shape: tuple, inner: list[Node]) -> list[Node]:  # type: ignore[type-arg]
    """Loops over n and every pixel with the task's channels innermost (SIMD): NHWC's memory order."""
    body: list[Node] = [Loop("j", "width", inner, vector=True)]
    variables = ["n", *index_vars("s", len(x_shape) - 2)]
    sizes = [cexpr.size(s) for i, s in enumerate(x_shape) if i != 1]
    for var, size in reversed(list(zip(variables, sizes, strict=True))):
        body = [Loop(var, size, body)]
    return body


def _channel_blocks(layer: Layer, x: Tensor, body: list[Node]) -> list[Node]:
    """One parallel task per block of CHANNEL_BLOCK channels; ``width``: the channels of this block."""
    channels, block = cexpr.size(x.shape[1]), CHANNEL_BLOCK
    return [Loop("cb", f"({channels} + {block - 1}) / {block}", [Block([
        Stmt(f"const double count = (double)({_count(layer, x.shape)});"),
        Stmt(f"const int64_t width = {channels} - cb * {block} < {block} ? {channels} - cb * {block} : {block};"),
        *body,
    ])], parallel=True)]


def _block_index(x: Tensor) -> list[str]:
    return ["n", f"(cb * {CHANNEL_BLOCK} + j)", *index_vars("s", x.rank - 2)]


def _batch_norm_train_channels_last(layer: Layer, kc: KernelContext) -> list[Node]:
    x = layer.inputs[0]
    t = ctype_of(layer.outputs[0], layer)
    weight, bias = optional_input(layer, 1), optional_input(layer, 2)
    index = _block_index(x)
    c = [index[1]]
    xv = kc.load(x, index)
    scale = f" * (double){kc.load(weight, c)}" if weight is not None else ""
    shift = f" + (double){kc.load(bias, c)}" if bias is not None else ""
    eps = cexpr.literal(layer.attrs["eps"], "float64")
    block = CHANNEL_BLOCK
    return _channel_blocks(layer, x, [
        Stmt(f"double sum[{block}], mean[{block}], sq[{block}], a[{block}], bshift[{block}];"),
        Loop("j", str(block), [Stmt("sum[j] = 0; sq[j] = 0;")], vector=True),
        *_over_pixels(x.shape, [Stmt(f"sum[j] += {xv};")]),
        Loop("j", "width", [Stmt("mean[j] = sum[j] / count;")], vector=True),
        *_over_pixels(x.shape, [Stmt(f"const double dv = {xv} - mean[j];"), Stmt("sq[j] += dv * dv;")]),
        Loop("j", "width", [
            Stmt(f"const double invstd = 1.0 / {kc.math('sqrt')}(sq[j] / count + {eps});"),
            Emit(f"({t})mean[j]", tuple(c), 1),
            Emit(f"({t})invstd", tuple(c), 2),
            Emit(f"({t})(count > 1 ? sq[j] / (count - 1) : sq[j])", tuple(c), 3),
            Stmt(f"a[j] = invstd{scale};"),
            Stmt(f"bshift[j] = -mean[j] * a[j]{shift};"),
        ]),
        *_over_pixels(x.shape, [Emit(f"({t})({xv} * a[j] + bshift[j])", tuple(index), 0)]),
    ])


def _batch_norm_train_grad_channels_last(layer: Layer, kc: KernelContext) -> list[Node]:
    dy, x, mean, invstd = layer.inputs[:4]
    weight = optional_input(layer, 4)
    t = ctype_of(layer.outputs[0], layer)
    index = _block_index(x)
    c = [index[1]]
    xv, dyv = kc.load(x, index), kc.load(dy, index)
    w = f" * (double){kc.load(weight, c)}" if weight is not None else ""
    block = CHANNEL_BLOCK
    return _channel_blocks(layer, x, [
        Stmt(f"double mu[{block}], rs[{block}], sdy[{block}], sdyx[{block}], k[{block}], kx[{block}];"),
        Loop("j", "width", [Stmt(f"mu[j] = {kc.load(mean, c)}; rs[j] = {kc.load(invstd, c)}; sdy[j] = 0; sdyx[j] = 0;")]),
        *_over_pixels(x.shape, [Stmt(f"const double g = {dyv};"), Stmt("sdy[j] += g;"),
                                Stmt(f"sdyx[j] += g * ((double){xv} - mu[j]);")]),
        Loop("j", "width", [
            Stmt("const double dweight = sdyx[j] * rs[j];"),
            Emit(f"({t})dweight", tuple(c), 1),
            Emit(f"({t})sdy[j]", tuple(c), 2),
            Stmt(f"k[j] = rs[j]{w} / count;"),
            Stmt("kx[j] = dweight * rs[j];"),
        ]),
        *_over_pixels(x.shape, [
            Emit(f"({t})(k[j] * (count * (double){dyv} - sdy[j] - ((double){xv} - mu[j]) * kx[j]))", tuple(index), 0)]),
    ])


@kernel("batch_norm_train")
def batch_norm_train(layer: Layer, kc: KernelContext) -> list[Node]:
    x = layer.inputs[0]
    y = layer.outputs[0]
    if _is_channels_last(kc, x):
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
        Stmt(f"const double count = (double)({_count(layer, x.shape)});"),
        Stmt("double sum = 0;"),
        *_over_channel(x.rank, sizes, [Stmt(f"sum += {xv};")], reduction=("+", "sum")),
        Stmt("const double mean = sum / count;"),
        Stmt("double sq = 0;"),
        *_over_channel(x.rank, sizes, [Stmt(f"const double dv = {xv} - mean;"), Stmt("sq += dv * dv;")],
                       reduction=("+", "sq")),
        Stmt(f"const double invstd = 1.0 / {kc.math('sqrt')}(sq / count + {eps});"),
        Emit(f"({t})mean", ("c",), 1),
        Emit(f"({t})invstd", ("c",), 2),
        Emit(f"({t})(count > 1 ? sq / (count - 1) : sq)", ("c",), 3),
        Stmt(f"const double a = invstd{scale};"),
        Stmt(f"const double bshift = -mean * a{shift};"),
        *_over_channel(x.rank, sizes, [Emit(f"({t})({xv} * a + bshift)", tuple(index), 0)]),
    ]
    return [Loop("c", cexpr.size(x.shape[1]), body, parallel=True)]


@kernel("batch_norm_train_grad")
def batch_norm_train_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    dy, x, mean, invstd = layer.inputs[:4]
    if _is_channels_last(kc, dy, x):
        return _batch_norm_train_grad_channels_last(layer, kc)
    weight = optional_input(layer, 4)
    t = ctype_of(layer.outputs[0], layer)
    sizes = [cexpr.size(s) for i, s in enumerate(x.shape) if i != 1]
    index = ["n", "c", *index_vars("s", x.rank - 2)]
    xv, dyv = kc.load(x, index), kc.load(dy, index)
    w = f" * (double){kc.load(weight, ['c'])}" if weight is not None else ""
    body: list[Node] = [
        Stmt(f"const double count = (double)({_count(layer, x.shape)});"),
        Stmt(f"const double mu = {kc.load(mean, ['c'])}, rs = {kc.load(invstd, ['c'])};"),
        Stmt("double sdy = 0, sdyx = 0;"),
        *_over_channel(x.rank, sizes, [Stmt(f"const double g = {dyv};"), Stmt("sdy += g;"),
                                       Stmt(f"sdyx += g * ((double){xv} - mu);")], vector=False),
        Stmt("const double dweight = sdyx * rs;"),
        Emit(f"({t})dweight", ("c",), 1),
        Emit(f"({t})sdy", ("c",), 2),
        Stmt(f"const double k = rs{w} / count;"),
        Stmt("const double kx = dweight * rs;"),
        *_over_channel(x.rank, sizes, [
            Emit(f"({t})(k * (count * (double){dyv} - sdy - ((double){xv} - mu) * kx))", tuple(index), 0)]),
    ]
    return [Loop("c", cexpr.size(x.shape[1]), body, parallel=True)]
