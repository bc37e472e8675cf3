"""What gradient rules see: the backward-graph builder protocol and helpers shared by the rules.

A rule is ``gradient(layer, grads, b) -> grad per input (None: no gradient)``
where ``grads`` holds the gradient of each output (None: nothing flows into
it) and ``b`` builds the backward Graph (`sol.autodiff.builder.Builder`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..graph import Layer, Size, Tensor
from ._shapes import size_eq

FLOATS = ("float16", "bfloat16", "float32", "float64")


class GradBuilder(Protocol):
    def fwd(self, tensor: Tensor) -> Tensor:
        """The forward value of ``tensor`` as seen from the backward graph (saved activation, param or const)."""

    def layer(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> list[Tensor]:
        """Append a layer to the backward graph; its outputs."""

    def one(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> Tensor:
        """`layer` for single-output ops."""

    def wants(self, tensor: Tensor) -> bool:
        """Whether a gradient of ``tensor`` is needed (it depends on something the gradient is taken of)."""

    def const(self, value: float, dtype: str) -> Tensor:
        """A 0-d constant."""

    def array(self, value: np.ndarray) -> Tensor:
        """A constant tensor."""


def differentiable(tensor: Tensor) -> bool:
    return tensor.dtype in FLOATS


def no_gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
    """The rule of ops whose result is piecewise constant or not a float (comparisons, argmax, rounding)."""
    return [None] * len(layer.inputs)


def sum_to(b: GradBuilder, g: Tensor, shape: Sequence[Size]) -> Tensor:
    """Undo numpy broadcasting: sum ``g`` over the dims that broadcasting added or stretched to ``shape``."""
    lead = g.rank - len(shape)
    axes = list(range(lead))
    for i, size in enumerate(shape):
        if size == 1 and g.shape[lead + i] != 1:
            axes.append(lead + i)
    if axes:
        g = b.one("reduce_sum", [g], {"axes": tuple(axes), "keepdims": True})
    if g.rank != len(shape) or not all(size_eq(a, c) for a, c in zip(g.shape, shape, strict=False)):
        g = b.one("reshape", [g], {"shape": tuple(shape)})
    return g


def mul(b: GradBuilder, *factors: Tensor) -> Tensor:
    out = factors[0]
    for f in factors[1:]:
        out = b.one("mul", [out, f])
    return out


def scalar(b: GradBuilder, value: float, like: Tensor) -> Tensor:
    return b.const(value, like.dtype if like.dtype in FLOATS else "float32")


def masked(b: GradBuilder, condition: Tensor, g: Tensor) -> Tensor:
    """g where condition holds, else 0."""
    return b.one("where", [condition, g, scalar(b, 0.0, g)])


def zeros_like(b: GradBuilder, t: Tensor) -> Tensor:
    return b.one("expand", [scalar(b, 0.0, t)], {"shape": t.shape})


def const_array(value: Any, dtype: str) -> np.ndarray:
    return np.asarray(value, dtype=dtype)
