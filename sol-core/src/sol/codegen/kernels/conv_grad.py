"""The weight gradient of a convolution: one output element (oc, ic, tap) per parallel iteration.

Each element sums dy * x over the batch and every output position; the
innermost loop runs unit-stride over an output row of dy (clipped to the
positions whose tap lands inside x, so no per-element branches) and
accumulates in float, each row's sum is added to a double accumulator.
"""

from __future__ import annotations

from ...ir import Layer
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt
from .base import KernelContext, ctype_of, kernel


@kernel("conv_grad_weight")
def conv_grad_weight(layer: Layer, kc: KernelContext) -> list[Node]:
    x, dy = layer.inputs
    dw = layer.outputs[0]
    t = ctype_of(dw, layer)
    r = x.rank - 2
    stride = [int(s) for s in layer.attrs["stride"]]
    dilation = [int(d) for d in layer.attrs["dilation"]]
    pads = [int(p[0]) for p in layer.attrs["padding"]]
    groups = int(layer.attrs["groups"])
    ins = [cexpr.static(s, f"spatial size of {layer.name!r}") for s in x.shape[2:]]
    outs = [cexpr.static(s, f"output size of {layer.name!r}") for s in dy.shape[2:]]
    kernel_sizes = [int(k) for k in layer.attrs["kernel"]]
    out_channels = cexpr.static(dy.shape[1], f"output channels of {layer.name!r}")
    cg = cexpr.static(dw.shape[1], f"channels per group of {layer.name!r}")
    ocg = out_channels // groups
    xp, dyp = kc.ptr(x), kc.ptr(dy)
    s, d, p = stride[-1], dilation[-1], pads[-1]
    x_row = cexpr.linear(["n", f"(g * {cg} + ic)", *[f"ih{i}" for i in range(r - 1)], "0"], x.shape)
    dy_row = cexpr.linear(["n", "oc", *[f"o{i}" for i in range(r - 1)], "0"], dy.shape)
    row: list[Node] = [
        Stmt(f"const int64_t xb = {x_row} + k{r - 1} * {d} - {p}, yb = {dy_row};"),
        Stmt(f"{t} racc = 0;"),
        Loop("ow", "hi", [Stmt(f"racc += {dyp}[yb + ow] * {xp}[xb + ow * {s}];")], start="lo", vector=True,
             reduction=("+", "racc")),
        Stmt("acc += racc;"),
    ]
    body: list[Node] = row
    for i in reversed(range(r - 1)):
        check = Stmt(f"const int64_t ih{i} = o{i} * {stride[i]} - {pads[i]} + k{i} * {dilation[i]}; "
                     f"if (ih{i} < 0 || ih{i} >= {ins[i]}) continue;")
        body = [Loop(f"o{i}", str(outs[i]), [check, *body])]
    element: list[Node] = [
        Stmt(f"const int64_t g = oc / {ocg};"),
        Stmt(f"const int64_t lo = sol_max<int64_t>(0, sol_ceil_div({p} - k{r - 1} * {d}, {s}));"),
        Stmt(f"const int64_t hi = sol_min<int64_t>({outs[-1]}, sol_ceil_div({ins[-1] + p} - k{r - 1} * {d}, {s}));"),
        Stmt("double acc = 0;"),
        Loop("n", cexpr.size(x.shape[0]), body),
        Emit(f"({t})acc", ("oc", "ic", *[f"k{i}" for i in range(r)])),
    ]
    inner: list[Node] = element
    for var, extent in reversed(list(zip(["oc", "ic", *[f"k{i}" for i in range(r)]],
                                         [out_channels, cg, *kernel_sizes], strict=True))):
        inner = [Loop(var, str(extent), inner, parallel=True)]
    return inner


#: columns of dw one task accumulates on its stack (a few KB, so wide layers cannot overflow it)
LINEAR_GRAD_COLUMNS = 512


@kernel("linear_grad_weight")
def linear_grad_weight(layer: Layer, kc: KernelContext) -> list[Node]:
    """dw[o, i] = sum over rows r of dy[r, o] * x[r, i]: one (o, column block) per task, SIMD over the columns.

    Both operands are read row by row (unit stride over x's features), so no transpose of dy is needed.
    """
    x, dy = layer.inputs
    dw = layer.outputs[0]
    t = ctype_of(dw, layer)
    rows = cexpr.mul(*(cexpr.size(s) for s in x.shape[:-1]))
    features = cexpr.static(x.shape[-1], f"input features of {layer.name!r}")
    outputs = cexpr.size(dy.shape[-1])
    width = min(features, LINEAR_GRAD_COLUMNS)
    blocks = -(-features // width)
    xp, dyp = kc.ptr(x), kc.ptr(dy)
    block: list[Node] = [
        Stmt(f"const int64_t lo = ib * {width}, hi = sol_min<int64_t>({features}, lo + {width});"),
        Stmt(f"alignas(64) {t} acc[{width}];"),
        Loop("j", str(width), [Stmt("acc[j] = 0;")], vector=True),
        Loop("r", rows, [
            Stmt(f"const {t} g = {dyp}[r * {outputs} + o];"),
            Stmt(f"const {t}* xr = {xp} + r * {features};"),
            Loop("i", "hi", [Stmt("acc[i - lo] += g * xr[i];")], start="lo", vector=True),
        ]),
        Loop("i", "hi", [Emit("acc[i - lo]", ("o", "i"))], start="lo", vector=True),
    ]
    return [Loop("o", outputs, [Loop("ib", str(blocks), [Block(block)], parallel=True)], parallel=True)]
