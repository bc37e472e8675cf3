"""Gradient rules of the elementwise ops (elementwise and math_extra); they fuse like the forward."""

from __future__ import annotations

import math

from ..graph import Layer, Tensor
from ..registry import gradient
from . import elementwise, math_extra  # noqa: F401  (the ops must be registered before their rules)
from ._grad import GradBuilder, differentiable, masked, mul, no_gradient, scalar, sum_to

Grads = list[Tensor | None]


def _unary(layer: Layer, grads: Grads, b: GradBuilder) -> tuple[Tensor | None, Tensor, Tensor]:
    """(dy, forward x, forward y) views; x/y are materialised in the backward only when a rule uses them."""
    return grads[0], layer.inputs[0], layer.outputs[0]


@gradient("identity", "dropout", "stochastic_depth", "contiguous")
def _identity(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    return [grads[0]] + [None] * (len(layer.inputs) - 1)


@gradient("relu")
def _relu(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, _, y = _unary(layer, grads, b)
    if dy is None:
        return [None]
    # PyTorch's threshold_backward: the gradient passes where the *result* is positive
    return [masked(b, b.one("gt", [b.fwd(y), scalar(b, 0.0, y)]), dy)]


@gradient("leaky_relu")
def _leaky_relu(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    if dy is None:
        return [None]
    slope = b.one("mul", [dy, scalar(b, layer.attrs.get("negative_slope", 0.01), dy)])
    return [b.one("where", [b.one("gt", [b.fwd(x), scalar(b, 0.0, x)]), dy, slope])]


@gradient("clamp")
def _clamp(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    if dy is None:
        return [None]
    # hardtanh_backward (relu6, the common case): no gradient at the bounds themselves
    keep: Tensor | None = None
    for bound, cmp in ((layer.attrs.get("min"), "gt"), (layer.attrs.get("max"), "lt")):
        if bound is None:
            continue
        inside = b.one(cmp, [b.fwd(x), scalar(b, bound, x)])
        keep = inside if keep is None else b.one("logical_and", [keep, inside])
    return [dy if keep is None else masked(b, keep, dy)]


def _gelu_derivative(layer: Layer, b: GradBuilder, x: Tensor) -> Tensor:
    if layer.attrs.get("approximate", "none") == "tanh":
        k = math.sqrt(2.0 / math.pi)
        x2 = b.one("mul", [x, x])
        inner = mul(b, b.one("add", [x, mul(b, scalar(b, 0.044715, x), x2, x)]), scalar(b, k, x))
        t = b.one("tanh", [inner])
        dt = b.one("sub", [scalar(b, 1.0, x), b.one("mul", [t, t])])
        dinner = mul(b, b.one("add", [scalar(b, 1.0, x), mul(b, scalar(b, 3 * 0.044715, x), x2)]), scalar(b, k, x))
        left = b.one("mul", [scalar(b, 0.5, x), b.one("add", [scalar(b, 1.0, x), t])])
        return b.one("add", [left, mul(b, scalar(b, 0.5, x), x, dt, dinner)])
    cdf = mul(b, scalar(b, 0.5, x), b.one("add", [scalar(b, 1.0, x), b.one("erf", [mul(b, x, scalar(b, 1 / math.sqrt(2), x))])]))
    pdf = mul(b, b.one("exp", [mul(b, x, x, scalar(b, -0.5, x))]), scalar(b, 1 / math.sqrt(2 * math.pi), x))
    return b.one("add", [cdf, b.one("mul", [x, pdf])])


@gradient("gelu")
def _gelu(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    return [None if dy is None else b.one("mul", [dy, _gelu_derivative(layer, b, b.fwd(x))])]


@gradient("silu")
def _silu(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    if dy is None:
        return [None]
    xv = b.fwd(x)
    s = b.one("sigmoid", [xv])
    one = scalar(b, 1.0, x)
    return [mul(b, dy, s, b.one("add", [one, b.one("mul", [xv, b.one("sub", [one, s])])]))]


@gradient("sigmoid")
def _sigmoid(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, _, y = _unary(layer, grads, b)
    if dy is None:
        return [None]
    yv = b.fwd(y)
    return [mul(b, dy, yv, b.one("sub", [scalar(b, 1.0, y), yv]))]


@gradient("tanh")
def _tanh(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, _, y = _unary(layer, grads, b)
    if dy is None:
        return [None]
    yv = b.fwd(y)
    return [b.one("mul", [dy, b.one("sub", [scalar(b, 1.0, y), b.one("mul", [yv, yv])])])]


@gradient("hardswish")
def _hardswish(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    if dy is None:
        return [None]
    xv = b.fwd(x)
    middle = b.one("mul", [dy, b.one("add", [b.one("div", [xv, scalar(b, 3.0, x)]), scalar(b, 0.5, x)])])
    upper = b.one("where", [b.one("le", [xv, scalar(b, 3.0, x)]), middle, dy])
    return [masked(b, b.one("ge", [xv, scalar(b, -3.0, x)]), upper)]


@gradient("hardsigmoid")
def _hardsigmoid(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    if dy is None:
        return [None]
    xv = b.fwd(x)
    inside = b.one("logical_and", [b.one("gt", [xv, scalar(b, -3.0, x)]), b.one("lt", [xv, scalar(b, 3.0, x)])])
    return [masked(b, inside, b.one("div", [dy, scalar(b, 6.0, x)]))]


@gradient("elu")
def _elu(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, y = _unary(layer, grads, b)
    if dy is None:
        return [None]
    negative = b.one("mul", [dy, b.one("add", [b.fwd(y), scalar(b, layer.attrs.get("alpha", 1.0), y)])])
    return [b.one("where", [b.one("gt", [b.fwd(x), scalar(b, 0.0, x)]), dy, negative])]


@gradient("softplus")
def _softplus(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    if dy is None:
        return [None]
    bx = b.one("mul", [b.fwd(x), scalar(b, layer.attrs.get("beta", 1.0), x)])
    inside = b.one("mul", [dy, b.one("sigmoid", [bx])])
    return [b.one("where", [b.one("gt", [bx, scalar(b, layer.attrs.get("threshold", 20.0), x)]), dy, inside])]


@gradient("exp")
def _exp(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, _, y = _unary(layer, grads, b)
    return [None if dy is None else b.one("mul", [dy, b.fwd(y)])]


@gradient("log")
def _log(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    return [None if dy is None else b.one("div", [dy, b.fwd(x)])]


@gradient("sqrt")
def _sqrt(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, _, y = _unary(layer, grads, b)
    return [None if dy is None else b.one("div", [dy, b.one("mul", [b.fwd(y), scalar(b, 2.0, y)])])]


@gradient("rsqrt")
def _rsqrt(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, _, y = _unary(layer, grads, b)
    if dy is None:
        return [None]
    yv = b.fwd(y)
    return [mul(b, dy, yv, yv, yv, scalar(b, -0.5, y))]


@gradient("neg")
def _neg(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    return [None if grads[0] is None else b.one("neg", [grads[0]])]


@gradient("abs")
def _abs(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    return [None if dy is None or not differentiable(x) else b.one("mul", [dy, b.one("sign", [b.fwd(x)])])]


@gradient("erf")
def _erf(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    if dy is None:
        return [None]
    xv = b.fwd(x)
    return [mul(b, dy, b.one("exp", [b.one("neg", [b.one("mul", [xv, xv])])]), scalar(b, 2 / math.sqrt(math.pi), x))]


@gradient("reciprocal")
def _reciprocal(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, _, y = _unary(layer, grads, b)
    if dy is None:
        return [None]
    yv = b.fwd(y)
    return [b.one("neg", [mul(b, dy, yv, yv)])]


@gradient("cast")
def _cast(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy, x, _ = _unary(layer, grads, b)
    if dy is None or not differentiable(x) or not differentiable(layer.outputs[0]):
        return [None]
    return [dy if dy.dtype == x.dtype else b.one("cast", [dy], {"dtype": x.dtype})]


def _trig(name: str, derivative: str) -> None:
    """A unary rule dy * f'(x) with f' written in terms of x (``x``) and y (``y``) by the small table below."""

    def rule(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
        dy, x, y = _unary(layer, grads, b)
        if dy is None:
            return [None]
        xv = b.fwd(x)
        one = scalar(b, 1.0, x)
        if derivative == "cos":
            d = b.one("cos", [xv])
        elif derivative == "-sin":
            d = b.one("neg", [b.one("sin", [xv])])
        elif derivative == "1+y2":
            yv = b.fwd(y)
            d = b.one("add", [one, b.one("mul", [yv, yv])])
        elif derivative == "cosh":
            d = b.one("cosh", [xv])
        elif derivative == "sinh":
            d = b.one("sinh", [xv])
        elif derivative == "1/(1+x2)":
            d = b.one("reciprocal", [b.one("add", [one, b.one("mul", [xv, xv])])])
        elif derivative in ("1/sqrt(1-x2)", "-1/sqrt(1-x2)"):
            d = b.one("rsqrt", [b.one("sub", [one, b.one("mul", [xv, xv])])])
            d = b.one("neg", [d]) if derivative.startswith("-") else d
        elif derivative == "1/sqrt(x2+1)":
            d = b.one("rsqrt", [b.one("add", [b.one("mul", [xv, xv]), one])])
        elif derivative == "1/sqrt(x2-1)":
            d = b.one("rsqrt", [b.one("sub", [b.one("mul", [xv, xv]), one])])
        else:  # "1/(1-x2)"
            d = b.one("reciprocal", [b.one("sub", [one, b.one("mul", [xv, xv])])])
        return [b.one("mul", [dy, d])]

    gradient(name)(rule)


for _name, _derivative in {"sin": "cos", "cos": "-sin", "tan": "1+y2", "sinh": "cosh", "cosh": "sinh",
                           "atan": "1/(1+x2)", "asin": "1/sqrt(1-x2)", "acos": "-1/sqrt(1-x2)",
                           "asinh": "1/sqrt(x2+1)", "acosh": "1/sqrt(x2-1)", "atanh": "1/(1-x2)"}.items():
    _trig(_name, _derivative)

gradient("floor", "ceil", "round", "sign", "isnan", "isinf", "logical_not", "bitwise_not", "eq", "ne", "lt", "le", "gt",
         "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor")(no_gradient)


def _binary_grads(layer: Layer, ga: Tensor | None, gb: Tensor | None, b: GradBuilder) -> Grads:
    """Per-operand gradients summed back to each operand's shape (None for non-float operands)."""
    out: Grads = []
    for t, g in zip(layer.inputs, (ga, gb), strict=True):
        out.append(None if g is None or not b.wants(t) else sum_to(b, g, t.shape))
    return out


@gradient("add")
def _add(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    return [None, None] if grads[0] is None else _binary_grads(layer, grads[0], grads[0], b)


@gradient("sub")
def _sub(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    return [None, None] if dy is None else _binary_grads(layer, dy, b.one("neg", [dy]), b)


@gradient("mul")
def _mul(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None, None]
    x, y = layer.inputs
    ga = b.one("mul", [dy, b.fwd(y)]) if b.wants(x) else None
    gb = b.one("mul", [dy, b.fwd(x)]) if b.wants(y) else None
    return _binary_grads(layer, ga, gb, b)


@gradient("div")
def _div(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None or layer.attrs.get("rounding_mode") is not None:
        return [None, None]
    x, y = layer.inputs
    ga = b.one("div", [dy, b.fwd(y)]) if b.wants(x) else None
    gb = None
    if b.wants(y):
        gb = b.one("neg", [b.one("div", [b.one("mul", [dy, b.fwd(layer.outputs[0])]), b.fwd(y)])])
    return _binary_grads(layer, ga, gb, b)


@gradient("pow")
def _pow(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None, None]
    x, e = layer.inputs
    ga = gb = None
    if b.wants(x):
        xv, ev = b.fwd(x), b.fwd(e)
        lower = b.one("pow", [xv, b.one("sub", [ev, scalar(b, 1.0, e)])])
        ga = mul(b, dy, ev, lower)
    if b.wants(e):
        gb = mul(b, dy, b.fwd(layer.outputs[0]), b.one("log", [b.fwd(x)]))
    return _binary_grads(layer, ga, gb, b)


@gradient("maximum", "minimum")
def _extremum(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None, None]
    x, y = (b.fwd(t) for t in layer.inputs)
    wins = b.one("gt" if layer.op == "maximum" else "lt", [x, y])
    tie = b.one("eq", [x, y])
    half = b.one("mul", [dy, scalar(b, 0.5, dy)])
    # ties split the gradient evenly (PyTorch's rule)
    ga = b.one("where", [wins, dy, masked(b, tie, half)])
    gb = b.one("where", [b.one("logical_or", [wins, tie]), masked(b, tie, half), dy])
    return _binary_grads(layer, ga, gb, b)


@gradient("where")
def _where(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None, None, None]
    cond = b.fwd(layer.inputs[0])
    zero = scalar(b, 0.0, dy)
    ga, gb = b.one("where", [cond, dy, zero]), b.one("where", [cond, zero, dy])
    return [None, *_binary_grads(Layer("where", layer.inputs[1:], layer.outputs), ga, gb, b)]


@gradient("fmod", "mod")
def _remainder(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    if dy is None:
        return [None, None]
    x, y = layer.inputs
    quotient = b.one("div", [b.fwd(x), b.fwd(y)], {"rounding_mode": "trunc" if layer.op == "fmod" else "floor"})
    gb = b.one("neg", [b.one("mul", [dy, quotient])]) if b.wants(y) else None
    return _binary_grads(layer, dy if b.wants(x) else None, gb, b)
