"""The precision a model computes in: ``sol.optimize(..., precision=...)`` and ``compiler::precision``.

"fp32" (the default) computes as the framework does. "bf16" and "fp16" run
the library calls (Conv/Linear/MatMul) in that type with fp32 accumulation,
while inputs and outputs keep the user's dtype and normalisation statistics
and softmax stay fp32. "auto" picks bf16 where the device computes it
natively, else fp32.

Every backend says what it can compute through its flavour
(`sol.codegen.Flavour.precision_missing` / ``native_precision``); sol-core's
default is fp32 only, so a backend that has not implemented a reduced
precision raises a `SolUnsupportedError` naming what is missing instead of
silently computing in fp32.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import SolConfigError, SolUnsupportedError

if TYPE_CHECKING:
    from .codegen import Flavour

#: the precisions a model can be compiled for ("auto" resolves to one of the others per device)
PRECISIONS = ("fp32", "bf16", "fp16", "auto")
#: what each computing precision is called in torch / numpy terms (autocast's dtype -> precision)
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def requested(precision: str | None) -> str:
    """The precision asked for: the argument, else ``sol.config["compiler::precision"]``; checked against PRECISIONS."""
    if precision is None:
        import sol

        return str(sol.config["compiler::precision"])
    if not isinstance(precision, str) or precision.lower() not in PRECISIONS:
        raise SolConfigError(f"precision={precision!r} is not one of {list(PRECISIONS)}; "
                             "use 'fp32' (exact as the framework), 'bf16', 'fp16' or 'auto'")
    return precision.lower()


def resolve(precision: str | None, flavour: Flavour, where: str) -> str:
    """The precision ``flavour`` compiles ``precision`` in ("auto" made concrete), or a SOL error naming the
    feature the device (``where``, e.g. "x86:0") lacks."""
    wanted = requested(precision)
    if wanted == "fp32":
        return "fp32"
    if wanted == "auto":
        return flavour.native_precision()
    missing = flavour.precision_missing(wanted)
    if missing:
        raise SolUnsupportedError(f"precision={wanted!r} cannot run on {where}: {missing}. "
                                  "Use precision='fp32', or 'auto' (the fastest precision the device has natively).")
    return wanted


__all__ = ["PRECISIONS", "TORCH_DTYPES", "requested", "resolve"]
