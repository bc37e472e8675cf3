"""Training batch norm and its gradient: one channel per parallel iteration.

Statistics accumulate in double over the batch and every pixel of the
channel (two passes: mean, then the centred sum of squares), then the
normalised values are emitted, so activations/residual adds after the
forward fuse into its loop.
"""

from __future__ import annotations

from ...ir import Layer
from .. import cexpr
from ..nest import Emit, Loop, Node, Stmt, index_vars
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


@kernel("batch_norm_train")
def batch_norm_train(layer: Layer, kc: KernelContext) -> list[Node]:
    x = layer.inputs[0]
    y = layer.outputs[0]
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
