"""Shared by the x86 tests that build small graphs by hand: random float32 data and a conv layer with its
parameters, drawn from the calling module's generator (so each module's data stays its own)."""

from __future__ import annotations

import numpy as np
from sol.ir import Graph, Tensor

CONV = {"stride": (1, 1), "dilation": (1, 1), "groups": 1}


def f32(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def conv(rng: np.random.Generator, g: Graph, x: Tensor, name: str, cin: int, cout: int, k: int = 3, groups: int = 1,
         stride: int = 1) -> Tensor:
    """A k x k conv with "same" padding (odd k), weight and bias as parameters of ``g``."""
    w = g.add_param(f"{name}.weight", f32(rng, cout, cin // groups, k, k, scale=0.3))
    b = g.add_param(f"{name}.bias", f32(rng, cout))
    attrs = {**CONV, "groups": groups, "stride": (stride, stride), "padding": ((k // 2, k // 2),) * 2}
    (y,) = g.add_layer("conv", [x, w, b], attrs, name=name)
    return y
