"""C spellings of SOL's sizes, dtypes and index arithmetic.

Sizes are ints or sympy expressions of `sol.ir.BATCH`; generated code names
the runtime batch ``N`` (an ``int64_t`` argument of every entry point), so a
size becomes a C expression of ``N``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import sympy

from ..errors import SolUnsupportedError
from ..ir import BATCH, Size

#: C type of each supported IR dtype (16-bit floats need a flavour with native types; not yet).
C_TYPES = {
    "float32": "float",
    "float64": "double",
    "int64": "int64_t",
    "int32": "int32_t",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "bool": "bool",
}


def ctype(dtype: str, where: str = "") -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        at = f" ({where})" if where else ""
        raise SolUnsupportedError(
            f"dtype {dtype}{at} is not supported by generated code yet; supported: {', '.join(C_TYPES)}"
        ) from None


def size(value: Size) -> str:
    """A size as C code of the runtime batch ``N``."""
    if isinstance(value, int):
        return str(value)
    expr = sympy.sympify(value)
    if expr.free_symbols - {BATCH}:
        raise SolUnsupportedError(f"size {value} depends on symbols other than the batch N")
    return "((int64_t)(" + sympy.ccode(expr) + "))"


def static(value: Size, what: str) -> int:
    """An int size; generated code keeps such sizes in stack buffers and loop bounds."""
    if not isinstance(value, int):
        raise SolUnsupportedError(f"{what} must not depend on the batch size (it is {value})")
    return value


def mul(*terms: str) -> str:
    """A product of C terms, dropping the factors 1 and folding 0."""
    kept = [t for t in terms if t != "1"]
    if any(t == "0" for t in kept):
        return "0"
    if not kept:
        return "1"
    return "*".join(t if _atomic(t) else f"({t})" for t in kept)


def add(*terms: str) -> str:
    kept = [t for t in terms if t != "0"]
    if not kept:
        return "0"
    return " + ".join(kept)


def _atomic(term: str) -> bool:
    return term.replace("_", "").isalnum() or (term.startswith("((") and term.endswith("))"))


def linear(index: Sequence[str], shape: Sequence[Size]) -> str:
    """Row-major offset of a multi-index (Horner form keeps it short)."""
    expr = "0"
    for i, (idx, extent) in enumerate(zip(index, shape, strict=True)):
        if i == 0:
            expr = idx
        else:
            expr = add(mul(expr, size(extent)) if expr != "0" else "0", idx)
    return expr if expr else "0"


def broadcast_index(index: Sequence[str], out_shape: Sequence[Size], in_shape: Sequence[Size]) -> list[str]:
    """numpy broadcasting: the input's multi-index for an output multi-index (right-aligned, size-1 dims read 0)."""
    lead = len(out_shape) - len(in_shape)
    if lead < 0:
        raise SolUnsupportedError(f"cannot broadcast shape {list(in_shape)} to {list(out_shape)}")
    result = []
    for i, extent in enumerate(in_shape):
        out_extent = out_shape[lead + i]
        result.append("0" if extent == 1 and out_extent != 1 else index[lead + i])
    return result


def literal(value: float | int | bool, dtype: str) -> str:
    """A C literal of a dtype, spelling inf/nan portably."""
    if dtype == "bool":
        return "true" if value else "false"
    if dtype.startswith("float"):
        value = float(value)
        suffix = "f" if dtype == "float32" else ""
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        text = repr(value) if dtype == "float64" else repr(float(np.float32(value)))
        if "e" not in text and "." not in text:
            text += ".0"
        return f"{text}{suffix}" if value >= 0 else f"({text}{suffix})"
    ivalue = int(value)
    if dtype == "int64":
        return f"INT64_C({ivalue})"
    return str(ivalue) if ivalue >= 0 else f"({ivalue})"


def identifier(name: str) -> str:
    """A C identifier derived from a tensor/layer/model name."""
    out = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    if not out or out[0].isdigit():
        out = "_" + out
    return out
