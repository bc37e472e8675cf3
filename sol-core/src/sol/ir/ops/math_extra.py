"""More elementwise ops (module DFP, fusible): trigonometry, rounding, classification, logic, remainders.

They complete the elementwise family for ONNX's operator set; the C
expressions live in `sol.codegen.kernels.math_extra`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..graph import TensorType
from ..registry import op
from ._shapes import broadcast, promote

_FLOATS = ("float16", "bfloat16", "float32", "float64")

#: name -> (numpy function, docstring); float in, same float out
_FLOAT_UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "sin": (np.sin, "sin(x)"), "cos": (np.cos, "cos(x)"), "tan": (np.tan, "tan(x)"),
    "asin": (np.arcsin, "asin(x)"), "acos": (np.arccos, "acos(x)"), "atan": (np.arctan, "atan(x)"),
    "sinh": (np.sinh, "sinh(x)"), "cosh": (np.cosh, "cosh(x)"), "asinh": (np.arcsinh, "asinh(x)"),
    "acosh": (np.arccosh, "acosh(x)"), "atanh": (np.arctanh, "atanh(x)"),
    "floor": (np.floor, "floor(x)"), "ceil": (np.ceil, "ceil(x)"),
    "round": (np.round, "round half to even (numpy's rule)"),
}


def _float_dtype(dtype: str) -> str:
    return dtype if dtype in _FLOATS else "float32"


def _register(name: str, doc: str, infer: Callable[..., list[TensorType]],
              reference: Callable[..., list[np.ndarray]]) -> None:
    cls = type(name, (), {"__doc__": doc, "infer": staticmethod(infer), "reference": staticmethod(reference)})
    op(name, module="DFP", elementwise=True)(cls)


def _float_unary(name: str, fn: Callable[[np.ndarray], np.ndarray], doc: str) -> None:
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [TensorType(inputs[0].dims, _float_dtype(inputs[0].dtype))]

    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        dtype = _float_dtype(str(x.dtype))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return [np.asarray(fn(x.astype(dtype, copy=False)), dtype=dtype)]

    _register(name, f"Elementwise {doc}.", infer, reference)


for _name, (_fn, _doc) in _FLOAT_UNARY.items():
    _float_unary(_name, _fn, _doc)


def _same_infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    return [inputs[0]]


def _bool_infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    return [TensorType(broadcast(inputs), "bool")]


_register("sign", "Elementwise sign(x) in {-1, 0, 1}, same dtype (NaN stays NaN).", _same_infer,
          lambda inputs, attrs: [np.sign(inputs[0])])
_register("isnan", "Elementwise x != x -> bool.", _bool_infer, lambda inputs, attrs: [np.isnan(inputs[0])])


def _isinf(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = inputs[0]
    pos = np.isposinf(x) if attrs.get("detect_positive", True) else np.zeros(x.shape, bool)
    neg = np.isneginf(x) if attrs.get("detect_negative", True) else np.zeros(x.shape, bool)
    return [pos | neg]


_register("isinf", "Elementwise infinity test -> bool; attrs: detect_positive, detect_negative (default true).",
          _bool_infer, _isinf)
_register("logical_not", "Elementwise not of a bool tensor.", _bool_infer,
          lambda inputs, attrs: [np.logical_not(inputs[0])])
_register("bitwise_not", "Elementwise ~x of an integer tensor.", _same_infer, lambda inputs, attrs: [np.invert(inputs[0])])


def _binary_infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    return [TensorType(broadcast(inputs), promote([(t.dtype, t.rank) for t in inputs]))]


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], doc: str) -> None:
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        dtype = promote([(str(x.dtype), x.ndim) for x in inputs])
        a, b = (x.astype(dtype, copy=False) for x in inputs)
        with np.errstate(invalid="ignore", divide="ignore"):
            return [np.asarray(fn(a, b), dtype=dtype)]

    _register(name, f"Elementwise {doc}, numpy broadcasting.", _binary_infer, reference)


def _logical(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    _register(name, f"Elementwise {name} of two bool tensors, numpy broadcasting.", _bool_infer,
              lambda inputs, attrs: [np.asarray(fn(inputs[0].astype(bool), inputs[1].astype(bool)), dtype=bool)])


_binary("fmod", np.fmod, "C remainder: the result has the sign of the dividend")
_binary("mod", np.mod, "Python remainder: the result has the sign of the divisor")
_binary("bitwise_and", np.bitwise_and, "a & b of integers")
_binary("bitwise_or", np.bitwise_or, "a | b of integers")
_binary("bitwise_xor", np.bitwise_xor, "a ^ b of integers")
_logical("logical_and", np.logical_and)
_logical("logical_or", np.logical_or)
_logical("logical_xor", np.logical_xor)
