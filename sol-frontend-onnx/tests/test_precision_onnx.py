"""sol.optimize(onnx_model, ..., precision=...) (sol.precision): bf16 where the host device computes it, a SOL
error naming what is missing where it does not; numpy in and out keep float32 either way."""

from __future__ import annotations

import numpy as np
import pytest
import sol
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from sol.compiler import flavour_for
from sol.errors import SolUnsupportedError

RNG = np.random.default_rng(5)
W = (RNG.standard_normal((64, 96)) * 0.1).astype(np.float32)


def _gemm():  # type: ignore[no-untyped-def]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 96])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])
    nodes = [helper.make_node("Gemm", ["x", "fc.weight"], ["h"], transB=1), helper.make_node("Tanh", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "gemm", [x], [y], [numpy_helper.from_array(W, "fc.weight")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_bf16_runs_where_the_host_has_it_and_is_refused_elsewhere() -> None:
    x = RNG.standard_normal((4, 96)).astype(np.float32)
    missing = flavour_for(None)[0].precision_missing("bf16")
    if missing is not None:
        with pytest.raises(SolUnsupportedError, match="precision='bf16' cannot run on"):
            sol.optimize(_gemm(), x, precision="bf16")
        return
    y = sol.optimize(_gemm(), x, precision="bf16")(x)
    exact = np.tanh(x.astype(np.float64) @ W.T.astype(np.float64))
    fp32 = ReferenceEvaluator(_gemm()).run(None, {"x": x})[0]
    assert np.abs(fp32 - exact).max() / np.abs(exact).max() < 1e-5  # the yardstick: fp32's own error
    assert y.dtype == np.float32
    error = float(np.abs(y - exact).max() / np.abs(exact).max())
    assert 1e-5 < error <= 2e-2  # bf16 operands (not fp32's ~1e-7), fp32 accumulation
