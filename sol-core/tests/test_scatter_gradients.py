"""Gradient rules of the scatter / N-d gather / selection ops, against central differences."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
from _autodiff_helpers import check_gradients, make_graph  # noqa: E402
from sol.autodiff import derive  # noqa: E402
from sol.errors import SolUnsupportedError  # noqa: E402
from sol.ir import Graph, Tensor  # noqa: E402

rng = np.random.default_rng(3)


def _scatter(op: str, attrs: dict):
    def build(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
        data, updates = p
        return g.add_layer(op, [data, e[0], updates], attrs)

    return build


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_elements(reduction: str) -> None:
    indices = np.array([[1, 3], [0, 2], [4, 4]], dtype=np.int64)  # row 2 repeats only with "add"
    if reduction == "none":
        indices = np.array([[1, 3], [0, 2], [4, 0]], dtype=np.int64)
    check_gradients(_scatter("scatter_elements", {"axis": 1, "reduction": reduction}),
                    [rng.standard_normal((3, 5)), rng.standard_normal((3, 2))], [indices])


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd(reduction: str) -> None:
    indices = np.array([[2], [0]], dtype=np.int64)
    check_gradients(_scatter("scatter_nd", {"reduction": reduction}),
                    [rng.standard_normal((4, 3)), rng.standard_normal((2, 3))], [indices])


def test_gather_nd() -> None:
    indices = np.array([[0, 1], [2, 2], [0, 1]], dtype=np.int64)  # a repeat: its gradients add up

    def build(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
        return g.add_layer("gather_nd", [p[0], e[0]])

    check_gradients(build, [rng.standard_normal((3, 4))], [indices])


def test_topk_and_max_pool_indices_values() -> None:
    def topk(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
        return g.add_layer("topk", p, {"axis": 1, "k": 2})[:1]

    check_gradients(topk, [rng.standard_normal((3, 5))])

    def pool(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
        return g.add_layer("max_pool_indices", p, {"kernel": (2, 2), "stride": (2, 2), "padding": (1, 1)})[:1]

    check_gradients(pool, [rng.standard_normal((1, 2, 4, 5))])


def test_reductions_without_gradient_name_the_layer() -> None:
    g = make_graph(_scatter("scatter_elements", {"axis": 0, "reduction": "mul"}),
                   [rng.standard_normal((3,)), rng.standard_normal((2,))], [np.array([0, 2], dtype=np.int64)])
    with pytest.raises(SolUnsupportedError, match="reduction 'mul'"):
        derive(g, set(g.params))
