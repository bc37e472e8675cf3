"""CompiledModel: the surface the frontends call, and validation before generated code runs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
from _codegen_helpers import dims, private_cache  # noqa: E402
from sol.compiler import compile_graph  # noqa: E402
from sol.errors import SolInputError  # noqa: E402
from sol.ir import BATCH, Graph  # noqa: E402
from sol.runtime import CompiledModel  # noqa: E402

__all__ = ["private_cache"]
pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture(scope="module")
def model(private_cache: None) -> CompiledModel:
    g = Graph("lookup")
    idx = g.add_input("idx", dims(0, 3), "int64")
    table = g.add_param("emb.weight", np.arange(20, dtype=np.float32).reshape(5, 4))
    (e,) = g.add_layer("embedding", [idx, table], name="emb")
    (y,) = g.add_layer("softmax", [e], {"axis": -1}, name="soft")
    g.outputs = [y, e]
    return compile_graph(g, passes=False)


def test_surface(model: CompiledModel) -> None:
    assert model.param_names == ["emb.weight"]
    assert [s.dtype for s in model.input_specs] == ["int64"]
    assert model.output_specs[0].shape == (BATCH, 3, 4)
    assert model.output_shapes(7) == [(7, 3, 4), (7, 3, 4)]


def test_run_with_pointers_and_growing_workspace(model: CompiledModel) -> None:
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    for batch in (2, 9, 3):
        idx = np.random.default_rng(batch).integers(0, 5, (batch, 3))
        outs = [np.empty(s, np.float32) for s in model.output_shapes(batch)]
        model.run([idx.ctypes.data], [table.ctypes.data], [o.ctypes.data for o in outs], batch)
        np.testing.assert_array_equal(outs[1], table[idx])
    assert model.workspace_size(9) >= model.workspace_size(2)


def test_out_of_range_index_raises_instead_of_reading_out_of_bounds(model: CompiledModel) -> None:
    params = {"emb.weight": np.zeros((5, 4), np.float32)}
    with pytest.raises(SolInputError, match="out of range"):
        model.run_numpy([np.array([[0, 5, 1]], dtype=np.int64)], params)


def test_bad_calls_are_refused_before_generated_code_runs(model: CompiledModel) -> None:
    params = {"emb.weight": np.zeros((5, 4), np.float32)}
    with pytest.raises(SolInputError, match="int64"):
        model.run_numpy([np.zeros((1, 3), np.int32)], params)
    with pytest.raises(SolInputError, match="takes 1 input"):
        model.run([], [1], [1, 1], 1)
    with pytest.raises(SolInputError, match="NULL"):
        model.run([0], [1], [1, 1], 1)
    with pytest.raises(SolInputError, match="batch"):
        model.run([1], [1], [1, 1], 0)
    with pytest.raises(SolInputError, match="parameters missing"):
        model.run_numpy([np.zeros((1, 3), np.int64)], {})
