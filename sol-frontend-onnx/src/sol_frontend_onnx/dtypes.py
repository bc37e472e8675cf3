"""ONNX element types <-> SOL dtype names (numpy's names)."""

from __future__ import annotations

import numpy as np
from onnx import helper
from sol.errors import SolUnsupportedError
from sol.ir import DTYPES

#: dtypes the generated code handles (sol.codegen.cexpr.C_TYPES); others fail at import with a clear message
SUPPORTED = tuple(d for d in DTYPES if d not in ("float16", "bfloat16"))


def sol_dtype(dtype: np.dtype | str, what: str) -> str:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in SUPPORTED:
        raise SolUnsupportedError(f"{what} has dtype {name}; SOL supports {', '.join(SUPPORTED)}")
    return name


def from_onnx(elem_type: int, what: str) -> str:
    """The SOL dtype of an ONNX TensorProto element type."""
    try:
        dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    except (KeyError, ValueError):
        raise SolUnsupportedError(f"{what} has the ONNX element type {elem_type}, which SOL does not support") from None
    return sol_dtype(dtype, what)


def contiguous(value: object, dtype: object = None) -> np.ndarray:
    """A C-contiguous array keeping the rank (np.ascontiguousarray turns 0-d arrays into 1-d ones)."""
    return np.require(np.asarray(value, dtype=dtype), requirements="C")
