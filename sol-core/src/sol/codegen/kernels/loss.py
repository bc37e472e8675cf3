"""Loss kernels: nll_loss (a serial sum over the batch: a scalar result), its gradient, and div_size."""

from __future__ import annotations

from ...ir import Layer
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt, nest
from .base import KernelContext, ctype_of, expression, kernel, optional_input


def _target(layer: Layer, kc: KernelContext, classes: str) -> list[Node]:
    """``tc``: the class of sample n, ``wt``: its weight (0 when ignored); an index outside [0, C) sets the status."""
    target = layer.inputs[1]
    weight = optional_input(layer, 2)
    ignore = int(layer.attrs.get("ignore_index", -100))
    load = kc.load(target, ["n"] if target.rank else [])
    w = f"(double){kc.ptr(weight)}[tc]" if weight is not None else "1.0"
    return [
        Stmt(f"int64_t tc = (int64_t){load};"),
        Stmt(f"double wt = tc == {ignore} ? 0.0 : 1.0;"),
        Stmt(f"if (tc == {ignore}) tc = 0; else if (tc < 0 || tc >= {classes}) "
             "{ sol_fail(&sol_status, SOL_STATUS_INDEX); tc = 0; wt = 0.0; }"),
        Stmt(f"wt *= {w};") if weight is not None else Stmt("(void)wt;"),
    ]


def _samples(layer: Layer) -> str:
    target = layer.inputs[1]
    return cexpr.size(target.shape[0]) if target.rank else "1"


@kernel("nll_loss")
def nll_loss(layer: Layer, kc: KernelContext) -> list[Node]:
    logp, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    classes = cexpr.size(logp.shape[-1])
    picked = kc.load(logp, ["n", "tc"] if logp.rank == 2 else ["tc"])
    per_sample = [*_target(layer, kc, classes), Stmt(f"const double loss = -(double){picked} * wt;")]
    reduction = layer.attrs.get("reduction", "mean")
    if reduction == "none":
        return nest(["n"], [_samples(layer)], [*per_sample, Emit(f"({t})loss", ("n",))], vector_last=False)
    result = "total / wsum" if reduction == "mean" else "total"
    return [Block([  # a scope of its own: several losses share one generated function
        Stmt("double total = 0, wsum = 0;"),
        Loop("n", _samples(layer), [*per_sample, Stmt("total += loss;"), Stmt("wsum += wt;")]),
        Emit(f"({t})({result})", ()),
    ])]


@kernel("nll_loss_grad")
def nll_loss_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    g, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    classes = str(int(layer.attrs["classes"]))
    reduction = layer.attrs.get("reduction", "mean")
    prelude: list[Node] = []
    if reduction == "mean":
        prelude = [Stmt("double wsum = 0;"), Loop("n", _samples(layer), [*_target(layer, kc, classes), Stmt("wsum += wt;")]),
                   Stmt(f"const double scale = (double){kc.ptr(g)}[0] / wsum;")]
    elif reduction == "sum":
        prelude = [Stmt(f"const double scale = (double){kc.ptr(g)}[0];")]
    scale = "scale" if reduction != "none" else f"(double){kc.load(g, ['n'] if g.rank else [])}"
    index = ("n", "c") if out.rank == 2 else ("c",)
    row: list[Node] = [*_target(layer, kc, classes),
                       Loop("c", classes, [Emit(f"({t})(c == tc ? -{scale} * wt : 0.0)", index)], vector=True)]
    if out.rank == 1:
        return [Block([*prelude, Stmt("const int64_t n = 0;"), *row])]
    return [Block([*prelude, *nest(["n"], [_samples(layer)], row, vector_last=False)])]


@expression("div_size")
def _div_size(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t = ctype_of(layer.outputs[0], layer)
    return f"(({t})({a[0]}) / ({t})({cexpr.size(layer.attrs['size'])}))"
