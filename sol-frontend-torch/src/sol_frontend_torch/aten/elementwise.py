"""Elementwise aten ops: activations, unary math, arithmetic with tensors or Python scalars, comparisons."""

from __future__ import annotations

import math
from typing import Any

from sol.errors import SolUnsupportedError
from sol.ir import Tensor

from ._registry import HANDLERS, Context, aten

_UNARY = {
    "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "silu": "silu", "hardswish": "hardswish",
    "hardsigmoid": "hardsigmoid", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "neg": "neg",
    "abs": "abs", "erf": "erf", "reciprocal": "reciprocal", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin",
    "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "floor": "floor", "ceil": "ceil", "sign": "sign", "isnan": "isnan",
}


def _register_unary(aten_name: str, sol_name: str) -> None:
    @aten(aten_name)
    def unary(cx: Context, x: Tensor) -> Tensor:
        return cx.one(sol_name, [x])


for _aten_name, _sol_name in _UNARY.items():
    _register_unary(_aten_name, _sol_name)


@aten("gelu")
def gelu(cx: Context, x: Tensor, approximate: str = "none") -> Tensor:
    return cx.one("gelu", [x], {"approximate": approximate})


@aten("leaky_relu")
def leaky_relu(cx: Context, x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return cx.one("leaky_relu", [x], {"negative_slope": float(negative_slope)})


@aten("elu")
def elu(cx: Context, x: Tensor, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Tensor:
    if scale != 1.0 or input_scale != 1.0:
        raise SolUnsupportedError("elu with scale/input_scale (selu/celu) is not supported")
    return cx.one("elu", [x], {"alpha": float(alpha)})


@aten("softplus")
def softplus(cx: Context, x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return cx.one("softplus", [x], {"beta": float(beta), "threshold": float(threshold)})


@aten("hardtanh", "clamp", "clip")
def clamp(cx: Context, x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - PyTorch's names
    if isinstance(min, Tensor) or isinstance(max, Tensor):  # bounds that are tensors (or one is): elementwise
        out = x if min is None else cx.one("maximum", [x, min if isinstance(min, Tensor) else cx.const(min, like=x)])
        return out if max is None else cx.one("minimum", [out, max if isinstance(max, Tensor) else cx.const(max, like=x)])
    return cx.one("clamp", [x], {"min": None if min is None else float(min), "max": None if max is None else float(max)})


@aten("clamp_min")
def clamp_min(cx: Context, x: Tensor, min: Any) -> Tensor:  # noqa: A002
    return clamp(cx, x, min, None)


@aten("clamp_max")
def clamp_max(cx: Context, x: Tensor, max: Any) -> Tensor:  # noqa: A002
    return clamp(cx, x, None, max)


@aten("relu6")
def relu6(cx: Context, x: Tensor) -> Tensor:
    return cx.one("clamp", [x], {"min": 0.0, "max": 6.0})


def _operand(cx: Context, value: Any) -> Tensor:
    return value if isinstance(value, Tensor) else cx.const(value)


@aten("add")
def add(cx: Context, a: Any, b: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        b = cx.one("mul", [_operand(cx, b), cx.const(alpha)])
    return cx.one("add", [_operand(cx, a), _operand(cx, b)])


@aten("sub", "subtract")
def sub(cx: Context, a: Any, b: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        b = cx.one("mul", [_operand(cx, b), cx.const(alpha)])
    return cx.one("sub", [_operand(cx, a), _operand(cx, b)])


@aten("rsub")
def rsub(cx: Context, a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return sub(cx, b, a, alpha=alpha)


@aten("mul", "multiply")
def mul(cx: Context, a: Any, b: Any) -> Tensor:
    return cx.one("mul", [_operand(cx, a), _operand(cx, b)])


@aten("div", "divide", "true_divide")
def div(cx: Context, a: Any, b: Any, *, rounding_mode: str | None = None) -> Tensor:
    attrs = {"rounding_mode": rounding_mode} if rounding_mode is not None else {}
    return cx.one("div", [_operand(cx, a), _operand(cx, b)], attrs)


@aten("pow")
def pow_(cx: Context, a: Any, b: Any) -> Tensor:
    # PyTorch computes these exponents as products (its pow_tensor_scalar_optimized_kernel), which is also what
    # GPT-2's tanh-GELU (x ** 3) needs to be fast: a generic powf per element costs 20x the multiplies
    if isinstance(a, Tensor) and isinstance(b, (int, float)) and not isinstance(b, bool) and \
            a.dtype.startswith(("float", "bfloat")):
        if b == 1:
            return a
        if b == 2:
            return cx.one("mul", [a, a])
        if b == 3:
            return cx.one("mul", [cx.one("mul", [a, a]), a])
        if b == 0.5:
            return cx.one("sqrt", [a])
        if b == -1:
            return cx.one("reciprocal", [a])
    return cx.one("pow", [_operand(cx, a), _operand(cx, b)])


@aten("maximum", "minimum")
def extremum(cx: Context, a: Any, b: Any) -> Tensor:
    return cx.one(cx.node.target.__name__.split(".")[0], [_operand(cx, a), _operand(cx, b)])  # type: ignore[union-attr]


def _register_compare(name: str) -> None:
    @aten(name)
    def compare(cx: Context, a: Any, b: Any) -> Tensor:
        return cx.one(name, [_operand(cx, a), _operand(cx, b)])


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _register_compare(_name)
for _alias, _name in (("greater", "gt"), ("greater_equal", "ge"), ("less", "lt"), ("less_equal", "le"),
                      ("not_equal", "ne")):
    HANDLERS[_alias] = HANDLERS[_name]


@aten("floor_divide")
def floor_divide(cx: Context, a: Any, b: Any) -> Tensor:
    return div(cx, a, b, rounding_mode="floor")


@aten("addcmul", "addcdiv")
def addc(cx: Context, x: Tensor, a: Any, b: Any, *, value: Any = 1) -> Tensor:
    """x + value * a * b (addcmul), x + value * a / b (addcdiv)."""
    name = cx.node.target.__name__.split(".")[0].removesuffix("_")  # type: ignore[union-attr]
    term = cx.one("mul" if name == "addcmul" else "div", [_operand(cx, a), _operand(cx, b)])
    if value != 1:
        term = cx.one("mul", [term, cx.const(value, like=x)])
    return cx.one("add", [x, term])


@aten("lerp")
def lerp(cx: Context, start: Tensor, end: Any, weight: Any) -> Tensor:
    """start + weight * (end - start)."""
    step = cx.one("mul", [_operand(cx, weight), cx.one("sub", [_operand(cx, end), start])])
    return cx.one("add", [start, step])


@aten("square")
def square(cx: Context, x: Tensor) -> Tensor:
    return cx.one("mul", [x, x])


@aten("mish")
def mish(cx: Context, x: Tensor) -> Tensor:
    """x * tanh(softplus(x)) (softplus with PyTorch's threshold 20)."""
    soft = cx.one("softplus", [x], {"beta": 1.0, "threshold": 20.0})
    return cx.one("mul", [x, cx.one("tanh", [soft])])


@aten("trunc", "fix")
def trunc(cx: Context, x: Tensor) -> Tensor:
    """Towards zero: floor of the magnitude, with the sign back."""
    if not x.dtype.startswith(("float", "bfloat")):
        return x
    return cx.one("mul", [cx.one("sign", [x]), cx.one("floor", [cx.one("abs", [x])])])


def _register_log_base(name: str, base: float) -> None:
    @aten(name)
    def log_base(cx: Context, x: Tensor) -> Tensor:
        return cx.one("mul", [cx.one("log", [x]), cx.const(1.0 / math.log(base), like=x)])


_register_log_base("log2", 2.0)
_register_log_base("log10", 10.0)


@aten("remainder")
def remainder(cx: Context, a: Any, b: Any) -> Tensor:
    """Python's %: the result has the sign of the divisor."""
    return cx.one("mod", [_operand(cx, a), _operand(cx, b)])


@aten("fmod")
def fmod(cx: Context, a: Any, b: Any) -> Tensor:
    """C's remainder: the result has the sign of the dividend."""
    return cx.one("fmod", [_operand(cx, a), _operand(cx, b)])


@aten("where")
def where(cx: Context, cond: Tensor, a: Any, b: Any) -> Tensor:
    return cx.one("where", [cond, _operand(cx, a), _operand(cx, b)])


def _register_bitwise(names: tuple[str, ...], sol_name: str) -> None:
    @aten(*names)
    def bitwise(cx: Context, a: Any, b: Any) -> Tensor:
        return cx.one(sol_name, [_operand(cx, a), _operand(cx, b)])


_register_bitwise(("bitwise_and", "__and__", "__iand__"), "bitwise_and")
_register_bitwise(("bitwise_or", "__or__", "__ior__"), "bitwise_or")
_register_bitwise(("bitwise_xor", "__xor__", "__ixor__"), "bitwise_xor")
_register_bitwise(("logical_and",), "logical_and")
_register_bitwise(("logical_or",), "logical_or")
_register_bitwise(("logical_xor",), "logical_xor")


@aten("bitwise_not", "__invert__")
def bitwise_not(cx: Context, x: Tensor) -> Tensor:
    return cx.one("logical_not" if x.dtype == "bool" else "bitwise_not", [x])


@aten("logical_not")
def logical_not(cx: Context, x: Tensor) -> Tensor:
    return cx.one("logical_not", [x])
