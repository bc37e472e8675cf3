"""Elementwise ops (module DFP, fusible into Clusters): unary math, binary arithmetic, comparisons.

Binary ops broadcast like numpy and promote dtypes like PyTorch (a 0-d
"const" made from a Python scalar does not widen a float32 tensor).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..graph import TensorType
from ..registry import op
from ._shapes import broadcast, promote, result_dtype, result_dtype_np


def _erf(x: np.ndarray) -> np.ndarray:
    # scipy is optional; its erf is exact and vectorised. Imported on first use: importing scipy.special
    # takes most of a second, which would otherwise be paid by every `sol.optimize` in a fresh process.
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - exercised only without scipy
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    return erf(x)

_FLOATS = ("float16", "bfloat16", "float32", "float64")

Unary = Callable[[np.ndarray, dict[str, Any]], np.ndarray]


def _float_dtype(dtype: str) -> str:
    return dtype if dtype in _FLOATS else "float32"


def _gelu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if a.get("approximate", "none") == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _softplus(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    beta, threshold = a.get("beta", 1.0), a.get("threshold", 20.0)
    bx = beta * x
    # PyTorch reverts to the identity above the threshold for numerical stability.
    return np.where(bx > threshold, x, np.log1p(np.exp(np.minimum(bx, threshold))) / beta)


def _clamp(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if a.get("min") is not None:
        x = np.maximum(x, a["min"])
    if a.get("max") is not None:
        x = np.minimum(x, a["max"])
    return x


def _sigmoid(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


#: name -> (numpy function, keeps integer dtypes, docstring)
_UNARY: dict[str, tuple[Unary, bool, str]] = {
    "relu": (lambda x, a: np.maximum(x, 0), True, "max(x, 0)"),
    "leaky_relu": (lambda x, a: np.where(x >= 0, x, x * a.get("negative_slope", 0.01)), False, "attrs: negative_slope"),
    "clamp": (_clamp, True, "attrs: min, max (either may be None); relu6 is clamp(0, 6)"),
    "gelu": (_gelu, False, 'attrs: approximate "none" (erf) or "tanh"'),
    "silu": (lambda x, a: x * _sigmoid(x, a), False, "x * sigmoid(x)"),
    "sigmoid": (_sigmoid, False, "1 / (1 + exp(-x))"),
    "tanh": (lambda x, a: np.tanh(x), False, "tanh(x)"),
    "hardswish": (lambda x, a: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0, False, "x * relu6(x + 3) / 6"),
    "hardsigmoid": (lambda x, a: np.clip(x + 3.0, 0.0, 6.0) / 6.0, False, "relu6(x + 3) / 6"),
    "elu": (lambda x, a: np.where(x > 0, x, a.get("alpha", 1.0) * np.expm1(np.minimum(x, 0))), False, "attrs: alpha"),
    "softplus": (_softplus, False, "attrs: beta, threshold"),
    "exp": (lambda x, a: np.exp(x), False, "exp(x)"),
    "log": (lambda x, a: np.log(x), False, "log(x)"),
    "sqrt": (lambda x, a: np.sqrt(x), False, "sqrt(x)"),
    "rsqrt": (lambda x, a: 1.0 / np.sqrt(x), False, "1 / sqrt(x)"),
    "neg": (lambda x, a: -x, True, "-x"),
    "abs": (lambda x, a: np.abs(x), True, "|x|"),
    "erf": (lambda x, a: _erf(x), False, "the error function"),
    "reciprocal": (lambda x, a: 1.0 / x, False, "1 / x"),
    "identity": (lambda x, a: x, True, "x; removed by the identity-removal pass"),
    "dropout": (lambda x, a: x, True, "identity in inference; attrs: p; removed by the identity-removal pass"),
    "stochastic_depth": (lambda x, a: x, True, 'identity in inference; attrs: p, mode ("row"|"batch"); removed by the identity-removal pass'),
}

#: ops that are the identity in inference; `sol.passes.remove_identity` drops them.
IDENTITY_OPS = frozenset({"identity", "dropout", "stochastic_depth", "contiguous"})


def _register_unary(name: str, fn: Unary, keeps_int: bool, doc: str) -> None:
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        return [TensorType(x.dims, x.dtype if keeps_int else _float_dtype(x.dtype))]

    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        dtype = x.dtype if keeps_int else np.dtype(_float_dtype(str(x.dtype)))
        return [np.asarray(fn(x, attrs), dtype=dtype)]

    cls = type(name, (), {"__doc__": f"Elementwise {name}: {doc}.", "infer": staticmethod(infer), "reference": staticmethod(reference)})
    op(name, module="DFP", elementwise=True)(cls)


for _name, (_fn, _keeps, _doc) in _UNARY.items():
    _register_unary(_name, _fn, _keeps, _doc)


@op("contiguous", module="DFP", elementwise=True)
class Contiguous:
    """The identity (a framework's memory-layout request); removed by the identity-removal pass."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [inputs[0]]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [inputs[0]]


@op("cast", module="DFP", elementwise=True)
class Cast:
    """Convert to attrs["dtype"] (a name of sol.ir.DTYPES)."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [TensorType(inputs[0].dims, str(attrs["dtype"]))]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        dtype = "float32" if attrs["dtype"] == "bfloat16" else attrs["dtype"]
        return [inputs[0].astype(dtype)]


def _div(a: np.ndarray, b: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    mode = attrs.get("rounding_mode")
    if mode == "floor":
        return np.floor_divide(a, b)
    if mode == "trunc":
        q = np.true_divide(a, b)
        return np.trunc(q) if np.issubdtype(np.result_type(a, b), np.floating) else np.asarray(q).astype(np.int64)
    return np.true_divide(a, b)


#: name -> (numpy function, docstring)
_BINARY: dict[str, tuple[Callable[[np.ndarray, np.ndarray, dict[str, Any]], np.ndarray], str]] = {
    "add": (lambda a, b, at: a + b, "a + b"),
    "sub": (lambda a, b, at: a - b, "a - b"),
    "mul": (lambda a, b, at: a * b, "a * b"),
    "div": (_div, 'a / b; attrs: rounding_mode None (true division) | "trunc" | "floor"'),
    "pow": (lambda a, b, at: np.power(a, b), "a ** b"),
    "maximum": (lambda a, b, at: np.maximum(a, b), "max(a, b)"),
    "minimum": (lambda a, b, at: np.minimum(a, b), "min(a, b)"),
}

_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}


def _binary_dtype(name: str, operands: Sequence[tuple[str, int]], attrs: dict[str, Any]) -> str:
    dtype = promote(operands)
    if name == "div" and attrs.get("rounding_mode") is None:
        return _float_dtype(dtype)
    return dtype


def _register_binary(name: str, fn: Callable[[np.ndarray, np.ndarray, dict[str, Any]], np.ndarray], doc: str) -> None:
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [TensorType(broadcast(inputs), _binary_dtype(name, [(t.dtype, t.rank) for t in inputs], attrs))]

    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        dtype = _binary_dtype(name, [(str(x.dtype), x.ndim) for x in inputs], attrs)
        a, b = (x.astype(dtype, copy=False) if name != "pow" or dtype in _FLOATS else x for x in inputs)
        return [np.asarray(fn(a, b, attrs), dtype=dtype)]

    cls = type(name, (), {"__doc__": f"Elementwise {doc}, numpy broadcasting, PyTorch type promotion.",
                          "infer": staticmethod(infer), "reference": staticmethod(reference)})
    op(name, module="DFP", elementwise=True)(cls)


def _register_compare(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [TensorType(broadcast(inputs), "bool")]

    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [np.asarray(fn(inputs[0], inputs[1]), dtype=bool)]

    cls = type(name, (), {"__doc__": f"Elementwise comparison {name}(a, b) -> bool, numpy broadcasting.",
                          "infer": staticmethod(infer), "reference": staticmethod(reference)})
    op(name, module="DFP", elementwise=True)(cls)


for _name, (_bfn, _doc) in _BINARY.items():
    _register_binary(_name, _bfn, _doc)
for _name, _cfn in _COMPARE.items():
    _register_compare(_name, _cfn)


@op("where", module="DFP", elementwise=True)
class Where:
    """where(cond, a, b): a where cond is true else b; numpy broadcasting of all three."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [TensorType(broadcast(inputs), result_dtype(inputs[1:]))]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [np.where(inputs[0].astype(bool), inputs[1], inputs[2]).astype(result_dtype_np(inputs[1:]))]
