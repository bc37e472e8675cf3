"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations, math functions, casts."""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.ir import Tensor

from ..dtypes import from_onnx
from ._registry import handler
from ._util import cast, reshape, scalar

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Equal": "eq", "Less": "lt", "Greater": "gt",
           "LessOrEqual": "le", "GreaterOrEqual": "ge", "And": "logical_and", "Or": "logical_or",
           "Xor": "logical_xor", "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}

_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
          "Neg": "neg", "Abs": "abs", "Erf": "erf", "Reciprocal": "reciprocal", "Floor": "floor", "Ceil": "ceil",
          "Round": "round", "Sign": "sign", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos",
          "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
          "IsNaN": "isnan", "Not": "logical_not", "BitwiseNot": "bitwise_not", "HardSwish": "hardswish"}


def _operands(ctx: Any) -> tuple[Tensor, Tensor]:
    """The two operands; opset < 7 broadcasting (``broadcast=1, axis=k``) aligns b at axis k of a."""
    a, b = ctx.need(0), ctx.need(1)
    if ctx.opset < 7 and ctx.attr("broadcast") and b.rank < a.rank:
        axis = int(ctx.attr("axis", a.rank - b.rank))
        axis = axis + a.rank if axis < 0 else axis
        b = reshape(ctx, b, tuple(b.shape) + (1,) * (a.rank - axis - b.rank))
    return a, b


@handler(*_BINARY)
def binary(ctx: Any) -> Tensor:
    return ctx.one(_BINARY[ctx.node.op_type], list(_operands(ctx)))


@handler("Div")
def div(ctx: Any) -> Tensor:
    a, b = _operands(ctx)
    # ONNX integer division truncates like C
    mode = None if a.dtype.startswith("float") else "trunc"
    return ctx.one("div", [a, b], {"rounding_mode": mode})


@handler("Pow")
def pow_(ctx: Any) -> Tensor:
    base, exponent = ctx.need(0), ctx.need(1)
    if base.dtype.startswith("float"):
        return ctx.one("pow", [base, cast(ctx, exponent, base.dtype)])
    if exponent.dtype.startswith("float"):  # the result keeps the base's integer type
        result = ctx.one("pow", [cast(ctx, base, "float64"), cast(ctx, exponent, "float64")])
        return cast(ctx, result, base.dtype)
    return ctx.one("pow", [base, cast(ctx, exponent, base.dtype)])


@handler(*_UNARY)
def unary(ctx: Any) -> Tensor:
    return ctx.one(_UNARY[ctx.node.op_type], [ctx.need(0)])


@handler("Mod")
def mod(ctx: Any) -> Tensor:
    return ctx.one("fmod" if ctx.attr("fmod", 0) else "mod", [ctx.need(0), ctx.need(1)])


@handler("Max", "Min", "Sum", "Mean")
def variadic(ctx: Any) -> Tensor:
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[ctx.node.op_type]
    operands = [t for t in ctx.inputs if t is not None]
    result = operands[0]
    for other in operands[1:]:
        result = ctx.one(op, [result, other])
    if ctx.node.op_type == "Mean" and len(operands) > 1:
        result = ctx.one("div", [result, scalar(ctx, len(operands), result)])
    elif len(operands) == 1:
        result = ctx.one("identity", [result])
    return result


@handler("Where")
def where(ctx: Any) -> Tensor:
    return ctx.one("where", [ctx.need(0), ctx.need(1), ctx.need(2)])


@handler("IsInf")
def isinf(ctx: Any) -> Tensor:
    attrs = {"detect_positive": bool(ctx.attr("detect_positive", 1)), "detect_negative": bool(ctx.attr("detect_negative", 1))}
    return ctx.one("isinf", [ctx.need(0)], attrs)


@handler("LeakyRelu")
def leaky_relu(ctx: Any) -> Tensor:
    return ctx.one("leaky_relu", [ctx.need(0)], {"negative_slope": float(ctx.attr("alpha", 0.01))})


@handler("Elu")
def elu(ctx: Any) -> Tensor:
    return ctx.one("elu", [ctx.need(0)], {"alpha": float(ctx.attr("alpha", 1.0))})


@handler("Selu")
def selu(ctx: Any) -> Tensor:
    x = ctx.need(0)
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    return ctx.one("mul", [ctx.one("elu", [x], {"alpha": alpha}), scalar(ctx, gamma, x)])


@handler("Celu")
def celu(ctx: Any) -> Tensor:
    x = ctx.need(0)
    alpha = float(ctx.attr("alpha", 1.0))
    # celu(x) = alpha * elu(x / alpha): for x > 0 both are x
    inner = ctx.one("elu", [ctx.one("div", [x, scalar(ctx, alpha, x)])], {"alpha": 1.0})
    return ctx.one("mul", [inner, scalar(ctx, alpha, x)])


@handler("ThresholdedRelu")
def thresholded_relu(ctx: Any) -> Tensor:
    x = ctx.need(0)
    keep = ctx.one("gt", [x, scalar(ctx, float(ctx.attr("alpha", 1.0)), x)])
    return ctx.one("where", [keep, x, scalar(ctx, 0, x)])


@handler("HardSigmoid")
def hard_sigmoid(ctx: Any) -> Tensor:
    x = ctx.need(0)
    alpha, beta = float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5))
    scaled = ctx.one("add", [ctx.one("mul", [x, scalar(ctx, alpha, x)]), scalar(ctx, beta, x)])
    return ctx.one("clamp", [scaled], {"min": 0.0, "max": 1.0})


@handler("Softplus")
def softplus(ctx: Any) -> Tensor:
    # ONNX's softplus has no threshold; above 20 log1p(exp(x)) == x in float32 anyway
    return ctx.one("softplus", [ctx.need(0)], {"beta": 1.0, "threshold": 20.0})


@handler("Softsign")
def softsign(ctx: Any) -> Tensor:
    x = ctx.need(0)
    return ctx.one("div", [x, ctx.one("add", [ctx.one("abs", [x]), scalar(ctx, 1.0, x)])])


@handler("Gelu")
def gelu(ctx: Any) -> Tensor:
    return ctx.one("gelu", [ctx.need(0)], {"approximate": ctx.sattr("approximate", "none")})


@handler("Mish")
def mish(ctx: Any) -> Tensor:
    x = ctx.need(0)
    return ctx.one("mul", [x, ctx.one("tanh", [ctx.one("softplus", [x], {"beta": 1.0, "threshold": 20.0})])])


@handler("Swish")
def swish(ctx: Any) -> Tensor:
    x = ctx.need(0)
    alpha = float(ctx.attr("alpha", 1.0))
    scaled = x if alpha == 1.0 else ctx.one("mul", [x, scalar(ctx, alpha, x)])
    return ctx.one("mul", [x, ctx.one("sigmoid", [scaled])])


@handler("PRelu")
def prelu(ctx: Any) -> Tensor:
    x, slope = ctx.need(0), ctx.need(1)
    if ctx.opset < 7 and slope.rank == 1 and x.rank > 2 and slope.shape[0] != x.shape[-1]:
        slope = reshape(ctx, slope, (slope.shape[0],) + (1,) * (x.rank - 2))  # one slope per channel (axis 1)
    negative = ctx.one("lt", [x, scalar(ctx, 0, x)])
    return ctx.one("where", [negative, ctx.one("mul", [x, slope]), x])


@handler("Shrink")
def shrink(ctx: Any) -> Tensor:
    x = ctx.need(0)
    bias, lambd = float(ctx.attr("bias", 0.0)), float(ctx.attr("lambd", 0.5))
    low = ctx.one("lt", [x, scalar(ctx, -lambd, x)])
    high = ctx.one("gt", [x, scalar(ctx, lambd, x)])
    upper = ctx.one("where", [high, ctx.one("sub", [x, scalar(ctx, bias, x)]), scalar(ctx, 0, x)])
    return ctx.one("where", [low, ctx.one("add", [x, scalar(ctx, bias, x)]), upper])


@handler("Clip")
def clip(ctx: Any) -> Tensor:
    x = ctx.need(0)
    if ctx.opset < 11:
        low, high = ctx.attr("min"), ctx.attr("max")
        return ctx.one("clamp", [x], {"min": low, "max": high})
    result = x
    for index, op in ((1, "maximum"), (2, "minimum")):
        bound = ctx.input(index)
        if bound is not None:
            result = ctx.one(op, [result, cast(ctx, bound, x.dtype)])
    return result if result is not x else ctx.one("identity", [x])


@handler("Identity")
def identity(ctx: Any) -> Tensor:
    return ctx.one("identity", [ctx.need(0)])


@handler("Dropout")
def dropout(ctx: Any) -> list[Tensor]:
    x = ctx.need(0)
    training = ctx.input(2)
    if training is not None and bool(np.asarray(ctx.static(training, "training_mode"))):
        ratio = ctx.input(1)
        if ratio is None or float(np.asarray(ctx.static(ratio, "ratio"))) != 0.0:
            # a zero ratio drops nothing: the same as inference
            raise ctx.unsupported("training_mode=True with a nonzero ratio: random masks (ONNX draws them from "
                                  "numpy's generator, SOL's dropout_train from its own seeded stream)")
    outputs = [ctx.one("identity", [x])]
    if ctx.wants_output(1):
        if not x.is_static:
            raise ctx.unsupported("the mask output of a batch-dependent shape")
        outputs.append(ctx.const(np.ones(tuple(int(s) for s in x.shape), dtype=bool), name="mask"))
    return outputs


@handler("Cast")
def cast_(ctx: Any) -> Tensor:
    dtype = from_onnx(int(ctx.attr("to")), "the target type")
    return ctx.one("cast", [ctx.need(0)], {"dtype": dtype})


@handler("CastLike")
def cast_like(ctx: Any) -> Tensor:
    return ctx.one("cast", [ctx.need(0)], {"dtype": ctx.need(1).dtype})
