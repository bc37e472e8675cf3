"""C expressions of the ops in `sol.ir.ops.math_extra` (all elementwise, so all fusible into epilogues)."""

from __future__ import annotations

from ...ir import Layer
from .base import KernelContext, ctype_of, expression

_FLOAT_UNARY = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                "floor", "ceil", "round")


def _t(layer: Layer) -> str:
    return ctype_of(layer.outputs[0], layer)


@expression(*_FLOAT_UNARY)
def _float_unary(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"{kc.math(layer.op)}(({_t(layer)})({a[0]}))"


@expression("sign")
def _sign(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t, x = _t(layer), a[0]
    # (0 < x) - (x < 0) is 0 for NaN; numpy keeps NaN, so floats pass NaN through
    value = f"({t})(({t})0 < ({x})) - ({t})(({x}) < ({t})0)"
    if layer.outputs[0].dtype.startswith("float"):
        return f"(({x}) != ({x}) ? ({x}) : ({t})({value}))"
    return f"({t})({value})"


@expression("isnan")
def _isnan(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"(({a[0]}) != ({a[0]}))"


@expression("isinf")
def _isinf(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    pos, neg = layer.attrs.get("detect_positive", True), layer.attrs.get("detect_negative", True)
    x = a[0]
    if pos and neg:
        return f"(bool){kc.math('isinf')}({x})"
    if pos:
        return f"(({x}) == INFINITY)"
    if neg:
        return f"(({x}) == -INFINITY)"
    return "false"


@expression("logical_not")
def _logical_not(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"(!({a[0]}))"


@expression("bitwise_not")
def _bitwise_not(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    if layer.outputs[0].dtype == "bool":  # C's ~ promotes to int: ~true is -2, true again as a bool
        return f"(!({a[0]}))"
    return f"({_t(layer)})(~({a[0]}))"


#: non-short-circuit forms: both operands are plain values, and `&&` would make the second one a branch
_LOGICAL = {"logical_and": "&", "logical_or": "|", "logical_xor": "!="}
_BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}


@expression(*_LOGICAL)
def _logical(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    return f"(bool)((bool)({a[0]}) {_LOGICAL[layer.op]} (bool)({a[1]}))"


@expression(*_BITWISE)
def _bitwise(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t = _t(layer)
    return f"({t})(({t})({a[0]}) {_BITWISE[layer.op]} ({t})({a[1]}))"


@expression("fmod", "mod")
def _remainder(layer: Layer, a: list[str], index: tuple[str, ...], kc: KernelContext) -> str:
    t = _t(layer)
    x, y = f"({t})({a[0]})", f"({t})({a[1]})"
    is_float = layer.outputs[0].dtype.startswith("float")
    r = f"{kc.math('fmod')}({x}, {y})" if is_float else f"({t})({x} % {y})"
    if layer.op == "fmod":
        return r
    # Python's rule: a non-zero remainder takes the sign of the divisor
    return f"(({r}) != 0 && ((({r}) < 0) != ({y} < 0)) ? ({t})(({r}) + {y}) : ({t})({r}))"
