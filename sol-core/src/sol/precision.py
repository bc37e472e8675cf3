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

fp32 itself may still be computed with TF32 tensor cores (10-bit mantissa
products, fp32 accumulation) in library calls: that is not a ``precision=``
value but the framework's own fp32 math setting, which PyTorch keeps per op
(``torch.backends.cudnn.conv.fp32_precision``: "tf32" by default;
``torch.backends.cuda.matmul.fp32_precision``: "ieee" by default). SOL follows
it per call: the frontend states the caller's settings with `using_fp32_math`
around each call of a compiled model, and a backend that has TF32 library
calls reads `fp32_math` when it launches one (the CUDA backend). Without a
framework saying otherwise fp32 is computed strictly (`STRICT`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Fp32Math:
    """Which fp32 library calls may compute with TF32 tensor cores (PyTorch's two switches)."""

    #: convolutions (forward and both gradients): PyTorch's ``torch.backends.cudnn.conv.fp32_precision == "tf32"``
    conv_tf32: bool = False
    #: matrix products (Linear, MatMul/BMM, attention's products): ``torch.backends.cuda.matmul.fp32_precision``
    matmul_tf32: bool = False

    #: the bits of `word`, as the generated code tests them (the CUDA backend's SOL_MATH_* constants)
    CONV_TF32 = 1
    MATMUL_TF32 = 2

    def word(self) -> int:
        """The settings as one int, the argument a generated entry point takes."""
        return (self.CONV_TF32 if self.conv_tf32 else 0) | (self.MATMUL_TF32 if self.matmul_tf32 else 0)

    @classmethod
    def from_word(cls, word: int) -> Fp32Math:
        return cls(conv_tf32=bool(word & cls.CONV_TF32), matmul_tf32=bool(word & cls.MATMUL_TF32))


#: fp32 computed in fp32 everywhere: the default when no framework states its settings
STRICT = Fp32Math()

#: the settings of the call in progress on this thread: an `Fp32Math`, or a function giving them (read only when a
#: backend launches a library call that depends on them)
_current: ContextVar[Fp32Math | Callable[[], Fp32Math] | None] = ContextVar("sol_fp32_math", default=None)


class using_fp32_math:  # noqa: N801 (used as a function: ``with using_fp32_math(...)``)
    """Calls of compiled models inside compute fp32 as ``math`` says (a function: asked at each launch, on the
    calling thread). Frontends wrap each call in it with the framework's current settings; a user of a frontend
    without such settings (ONNX) may wrap calls in it to allow TF32. A class rather than a generator: it wraps
    every call, and costs half as much."""

    __slots__ = ("_math", "_token")

    def __init__(self, math: Fp32Math | Callable[[], Fp32Math]) -> None:
        self._math = math

    def __enter__(self) -> None:
        self._token = _current.set(self._math)

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._token)


def fp32_math() -> Fp32Math:
    """The fp32 math of the call in progress (`using_fp32_math`), `STRICT` outside one."""
    current = _current.get()
    if current is None:
        return STRICT
    return current if isinstance(current, Fp32Math) else current()


__all__ = ["PRECISIONS", "STRICT", "TORCH_DTYPES", "Fp32Math", "fp32_math", "requested", "resolve",
           "using_fp32_math"]
