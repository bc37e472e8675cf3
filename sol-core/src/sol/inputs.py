"""``sol.input(...)``: describe a model input by shape instead of an example."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InputSpec:
    """A model input given by shape. A 0 in ``shape`` is the wildcard batch dimension."""

    shape: tuple[int, ...]
    requires_grad: bool = False
    dtype: Any = None  # a framework dtype, numpy dtype or name; None means float32

    @property
    def wildcard_dims(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.shape) if s == 0)


def input(shape, requires_grad: bool = False, dtype: Any = None) -> InputSpec:  # noqa: A001 - SOL's documented name
    """``sol.input([0, 3, 224, 224], requires_grad=False, dtype=torch.float32)``."""
    dims = tuple(int(s) for s in shape)
    if any(s < 0 for s in dims):
        raise ValueError(f"sol.input shape {list(dims)} has a negative size; use 0 for the wildcard batch dimension")
    if sum(1 for s in dims if s == 0) > 1:
        raise ValueError(f"sol.input shape {list(dims)} has more than one wildcard (0) dimension; only the batch may be a wildcard")
    return InputSpec(dims, bool(requires_grad), dtype)
