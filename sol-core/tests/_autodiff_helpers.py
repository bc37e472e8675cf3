"""Shared by the autodiff tests: derive a graph's gradients and check them against central differences."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from sol.autodiff import TrainingGraphs, derive
from sol.ir import Dim, Graph, Purpose, Tensor
from sol.ir.interpret import run_reference

#: build(graph, differentiable tensors, other inputs) -> outputs
Build = Callable[[Graph, list[Tensor], list[Tensor]], list[Tensor]]


def make_graph(build: Build, values: Sequence[np.ndarray], extras: Sequence[np.ndarray] = ()) -> Graph:
    """``values`` become parameters (differentiated), ``extras`` inputs (indices, RNG keys: not differentiated)."""
    g = Graph("case")
    params = [g.add_param(f"p{i}", np.asarray(v)) for i, v in enumerate(values)]
    inputs = [g.add_input(f"e{i}", [Dim(s, Purpose.C) for s in np.shape(e)], str(np.asarray(e).dtype))
              for i, e in enumerate(extras)]
    g.outputs = build(g, params, inputs)
    return g


def backward_inputs(tg: TrainingGraphs, forward: list[np.ndarray], inputs: Sequence[np.ndarray],
                    grads: Sequence[np.ndarray]) -> list[np.ndarray]:
    saved = [forward[s.index] if s.source == "output" else inputs[s.index] for s in tg.saved]
    return [*grads, *saved]


def check_gradients(build: Build, values: Sequence[np.ndarray], extras: Sequence[np.ndarray] = (),
                    eps: float = 1e-6, tol: float = 1e-6, seed: int = 0) -> None:
    """Derived gradients of sum(output * dy) w.r.t. every value equal central differences (float64)."""
    rng = np.random.default_rng(seed)
    values = [np.asarray(v, dtype=np.float64) for v in values]
    g = make_graph(build, values, extras)
    tg = derive(g, set(g.params))
    forward = run_reference(tg.forward, list(extras))
    dys = [rng.standard_normal(np.shape(forward[k])) for k in tg.differentiable]
    grads = dict(zip(tg.param_grads, run_reference(tg.backward, backward_inputs(tg, forward, extras, dys)), strict=True))

    def objective(params: dict[str, np.ndarray]) -> float:
        outs = run_reference(g, list(extras), params)
        return float(sum((outs[k] * dy).sum() for k, dy in zip(tg.differentiable, dys, strict=True)))

    base = {f"p{i}": v for i, v in enumerate(values)}
    for name, value in base.items():
        numeric = np.zeros_like(value)
        for index in np.ndindex(*value.shape):
            up, down = value.copy(), value.copy()
            up[index] += eps
            down[index] -= eps
            numeric[index] = (objective({**base, name: up}) - objective({**base, name: down})) / (2 * eps)
        derived = grads.get(name, np.zeros_like(value))
        np.testing.assert_allclose(derived, numeric, rtol=tol, atol=tol, err_msg=f"gradient of {name}")
