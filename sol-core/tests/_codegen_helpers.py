"""Shared by the codegen/runtime/compiler tests: build graphs of many cases, compile once, compare per case."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose, Tensor
from sol.ir.interpret import run_reference

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test module builds into its own cache (no cross-talk with the user's cache or other modules)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOL_CACHE_DIR", str(tmp_path_factory.mktemp("sol-cache")))
        yield


def dims(*sizes: int | object, batch: bool = True) -> list[Dim]:
    """Dims of an NC* tensor; the first is the wildcard batch when ``batch``."""
    out = []
    for i, s in enumerate(sizes):
        if i == 0 and batch:
            out.append(Dim(BATCH, Purpose.N))
        else:
            out.append(Dim(s, Purpose.P if i >= 2 else Purpose.C))
    return out


@dataclass
class CaseGraph:
    """A graph with one output per named case, so one build tests many ops."""

    name: str
    graph: Graph = field(init=False)
    cases: list[str] = field(default_factory=list)
    feeds: list[Callable[[int, np.random.Generator], np.ndarray]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.graph = Graph(self.name)

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "float32",
              make: Callable[[tuple[int, ...], np.random.Generator], np.ndarray] | None = None) -> Tensor:
        """An input whose first dim is the batch (``shape[0]`` is ignored)."""
        t = self.graph.add_input(name, dims(*shape), dtype)

        def feed(batch: int, rng: np.random.Generator) -> np.ndarray:
            full = (batch, *shape[1:])
            data = make(full, rng) if make else rng.standard_normal(full)
            return np.asarray(data).astype(dtype)

        self.feeds.append(feed)
        return t

    def param(self, name: str, data: np.ndarray) -> Tensor:
        return self.graph.add_param(name, np.asarray(data))

    def case(self, name: str, op: str, inputs: list[Tensor], attrs: dict | None = None) -> list[Tensor]:
        outs = self.graph.add_layer(op, inputs, attrs or {}, name=name)
        for i, t in enumerate(outs):
            self.cases.append(name if len(outs) == 1 else f"{name}[{i}]")
            self.graph.outputs.append(t)
        return outs


@dataclass
class Results:
    cases: dict[str, tuple[np.ndarray, np.ndarray]]


def run_cases(cg: CaseGraph, batches: tuple[int, ...] = (1, 3), seed: int = 0) -> dict[int, Results]:
    """Compile once; run at each batch; (got, expected) per case."""
    compiled = compile_graph(cg.graph, passes=False)
    params = {name: t.data for name, t in cg.graph.params.items()}
    results = {}
    for batch in batches:
        rng = np.random.default_rng(seed + batch)
        inputs = [feed(batch, rng) for feed in cg.feeds]
        got = compiled.run_numpy(inputs, params)
        expected = run_reference(cg.graph, inputs, params)
        results[batch] = Results({name: (g, e) for name, g, e in zip(cg.cases, got, expected, strict=True)})
    return results


def check(results: dict[int, Results], case: str) -> None:
    for batch, res in results.items():
        got, expected = res.cases[case]
        assert got.shape == expected.shape, f"{case} at batch {batch}: shape {got.shape} != {expected.shape}"
        assert got.dtype == expected.dtype, f"{case} at batch {batch}: dtype {got.dtype} != {expected.dtype}"
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL, err_msg=f"{case} at batch {batch}")
        else:
            np.testing.assert_array_equal(got, expected, err_msg=f"{case} at batch {batch}")
