"""More reductions (module DFP): minimum and product, ONNX's ReduceMin / ReduceProd."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..registry import op
from ._shapes import normalize_axis
from .reduction import _reduce_infer


def _reference(fn: Any) -> Any:
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axes = tuple(normalize_axis(a, x.ndim) for a in attrs["axes"])
        return [np.asarray(fn(x, axis=axes, keepdims=bool(attrs.get("keepdims", False))), dtype=x.dtype)]

    return reference


@op("reduce_min")
class ReduceMin:
    """Minimum over attrs['axes'] (tuple); attrs: keepdims."""

    infer = staticmethod(_reduce_infer)
    reference = staticmethod(_reference(np.min))


@op("reduce_prod")
class ReduceProd:
    """Product over attrs['axes'] (tuple); attrs: keepdims."""

    infer = staticmethod(_reduce_infer)
    reference = staticmethod(_reference(np.prod))
