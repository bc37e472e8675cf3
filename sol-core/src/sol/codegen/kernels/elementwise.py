"""Elementwise ops: a C expression per op, and the loop nest of a pure elementwise anchor.

Expressions are what clustering fuses into the epilogue of another kernel
(bias, activation, residual add), so every elementwise op is one here.
Operands arrive already converted to C expressions (a register of the
cluster, or a broadcast load); arithmetic happens in the output's C type.
"""

from __future__ import annotations

import math

from ...ir import Layer
from .. import cexpr
from ..nest import Emit, Node, index_vars, nest_in_order
from .base import KernelContext, ctype_of, expression, kernel, unsupported


def _t(layer: Layer) -> str:
    return ctype_of(layer.outputs[0], layer)


def _lit(layer: Layer, value: float) -> str:
    return cexpr.literal(value, layer.outputs[0].dtype if layer.outputs[0].dtype.startswith("float") else "float64")


@expression("identity", "dropout", "stochastic_depth", "contiguous")
def _identity(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return a[0]


@expression("relu")
def _relu(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    # `x < 0 ? 0 : x` lets NaN through, like numpy's maximum.
    return f"({a[0]} < 0 ? ({_t(layer)})0 : ({_t(layer)})({a[0]}))"


@expression("leaky_relu")
def _leaky_relu(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    slope = _lit(layer, layer.attrs.get("negative_slope", 0.01))
    return f"({a[0]} >= 0 ? {a[0]} : {a[0]} * {slope})"


@expression("clamp")
def _clamp(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t = _t(layer)
    out = f"({t})({a[0]})"
    lo, hi = layer.attrs.get("min"), layer.attrs.get("max")
    dtype = layer.outputs[0].dtype
    if lo is not None:
        out = f"sol_max<{t}>({out}, {cexpr.literal(lo, dtype)})"
    if hi is not None:
        out = f"sol_min<{t}>({out}, {cexpr.literal(hi, dtype)})"
    return out


@expression("gelu")
def _gelu(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    x = a[0]
    if layer.attrs.get("approximate", "none") == "tanh":
        c = _lit(layer, math.sqrt(2.0 / math.pi))
        inner = f"{c} * ({x} + {_lit(layer, 0.044715)} * {x} * {x} * {x})"
        return f"({_lit(layer, 0.5)} * {x} * ({_lit(layer, 1.0)} + {kc.math('tanh')}({inner})))"
    return f"({_lit(layer, 0.5)} * {x} * ({_lit(layer, 1.0)} + {kc.math('erf')}({x} * {_lit(layer, 1 / math.sqrt(2.0))})))"


def _sigmoid_of(layer: Layer, x: str, kc: KernelContext) -> str:
    one = _lit(layer, 1.0)
    return f"({one} / ({one} + {kc.math('exp')}(-({x}))))"


@expression("sigmoid")
def _sigmoid(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return _sigmoid_of(layer, a[0], kc)


@expression("silu")
def _silu(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"({a[0]} * {_sigmoid_of(layer, a[0], kc)})"


@expression("hardswish")
def _hardswish(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t, x = _t(layer), a[0]
    return f"({x} * sol_min<{t}>(sol_max<{t}>({x} + {_lit(layer, 3.0)}, 0), {_lit(layer, 6.0)}) / {_lit(layer, 6.0)})"


@expression("hardsigmoid")
def _hardsigmoid(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t, x = _t(layer), a[0]
    return f"(sol_min<{t}>(sol_max<{t}>({x} + {_lit(layer, 3.0)}, 0), {_lit(layer, 6.0)}) / {_lit(layer, 6.0)})"


@expression("elu")
def _elu(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    alpha = _lit(layer, layer.attrs.get("alpha", 1.0))
    return f"({a[0]} > 0 ? ({_t(layer)})({a[0]}) : {alpha} * {kc.math('expm1')}({a[0]}))"


@expression("softplus")
def _softplus(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    beta = _lit(layer, layer.attrs.get("beta", 1.0))
    threshold = _lit(layer, layer.attrs.get("threshold", 20.0))
    bx = f"({a[0]} * {beta})"
    # above the threshold PyTorch returns x itself (log1p(exp) would overflow)
    return f"({bx} > {threshold} ? ({_t(layer)})({a[0]}) : {kc.math('log1p')}({kc.math('exp')}({bx})) / {beta})"


_MATH_UNARY = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "abs": "abs"}


@expression(*_MATH_UNARY)
def _math_unary(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"{kc.math(_MATH_UNARY[layer.op])}(({_t(layer)})({a[0]}))"


@expression("rsqrt")
def _rsqrt(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"({_lit(layer, 1.0)} / {kc.math('sqrt')}(({_t(layer)})({a[0]})))"


@expression("reciprocal")
def _reciprocal(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"({_lit(layer, 1.0)} / ({_t(layer)})({a[0]}))"


@expression("neg")
def _neg(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"(-({_t(layer)})({a[0]}))"


@expression("cast")
def _cast(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    if layer.outputs[0].dtype == "bool":
        return f"({a[0]} != 0)"
    return f"({_t(layer)})({a[0]})"


_ARITH = {"add": "+", "sub": "-", "mul": "*"}


@expression(*_ARITH)
def _arith(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t = _t(layer)
    if t == "bool":  # bool add/mul are or/and in PyTorch
        return f"({a[0]} {'|' if layer.op == 'add' else '&'} {a[1]})"
    return f"(({t})({a[0]}) {_ARITH[layer.op]} ({t})({a[1]}))"


@expression("div")
def _div(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t = _t(layer)
    mode = layer.attrs.get("rounding_mode")
    x, y = f"({t})({a[0]})", f"({t})({a[1]})"
    is_float = layer.outputs[0].dtype.startswith("float")
    if mode is None or mode == "trunc":
        # C division truncates integers already; floats need an explicit trunc
        return f"{kc.math('trunc')}({x} / {y})" if (mode == "trunc" and is_float) else f"({x} / {y})"
    if mode == "floor":
        return f"{kc.math('floor')}({x} / {y})" if is_float else f"sol_floor_div<{t}>({x}, {y})"
    raise unsupported(layer, f"rounding_mode {mode!r}")


@expression("pow")
def _pow(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t = _t(layer)
    if not layer.outputs[0].dtype.startswith("float"):
        return f"sol_ipow<{t}>(({t})({a[0]}), ({t})({a[1]}))"
    return f"{kc.math('pow')}(({t})({a[0]}), ({t})({a[1]}))"


@expression("maximum", "minimum")
def _extremum(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t = _t(layer)
    fn = "sol_max" if layer.op == "maximum" else "sol_min"
    return f"{fn}<{t}>(({t})({a[0]}), ({t})({a[1]}))"


_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


@expression(*_COMPARE)
def _compare(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"({a[0]} {_COMPARE[layer.op]} {a[1]})"


@expression("where")
def _where(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t = _t(layer)
    # not `c ? a : b`: a load in a branch may not be hoisted, so the loop would stay scalar
    return f"sol_select<{t}>({a[0]}, ({t})({a[1]}), ({t})({a[2]}))"


@expression("batch_norm")
def _batch_norm(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    """Inference batch norm is elementwise given the channel (axis 1): it fuses like any activation."""
    channel = [index[1] if len(index) > 1 else "0"]
    mean, var = (kc.load(t, channel) for t in layer.inputs[1:3])
    eps = _lit(layer, layer.attrs["eps"])
    out = f"(({a[0]} - {mean}) / {kc.math('sqrt')}({var} + {eps}))"
    if len(layer.inputs) > 3 and layer.inputs[3] is not None:
        out = f"({out} * {kc.load(layer.inputs[3], channel)})"
    if len(layer.inputs) > 4 and layer.inputs[4] is not None:
        out = f"({out} + {kc.load(layer.inputs[4], channel)})"
    return out


#: operands of an expression that are per-element (broadcast) values; the rest are read by the expression itself
def elementwise_operands(layer: Layer) -> list[int]:
    return [0] if layer.op == "batch_norm" else list(range(len(layer.inputs)))


def elementwise_kernel(layer: Layer, kc: KernelContext) -> list[Node]:
    """A pure elementwise anchor: one loop per output dim, operands read with broadcasting."""
    out = layer.outputs[0]
    idx = index_vars("i", out.rank)
    from .base import EXPRESSIONS

    operands = elementwise_operands(layer)
    args = [kc.load_broadcast(t, idx, out.shape) if i in operands else "" for i, t in enumerate(layer.inputs)]
    value = EXPRESSIONS[layer.op](layer, args, tuple(idx), kc)
    # loops in the output's memory order: unit-stride stores (and loads, when the operands share the layout)
    return nest_in_order(idx, [cexpr.size(s) for s in out.shape], [Emit(value, tuple(idx))], kc.layout(out))


kernel("batch_norm")(elementwise_kernel)
