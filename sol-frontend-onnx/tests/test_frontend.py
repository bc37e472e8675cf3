"""sol.optimize on ONNX models: numpy in/out, wildcard batch, parameters, errors, `import sol.onnx`."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import onnx
import pytest
import sol
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from sol.errors import SolInputError, SolUnsupportedError

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)


def _mlp(opset: int = 17) -> onnx.ModelProto:
    """x[N, 4] -> flatten via Shape/Gather/Reshape -> Gemm(fc) -> Relu, plus a second output."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["y"]),
        helper.make_node("Sigmoid", ["h"], ["z"]),
    ]
    inits = [numpy_helper.from_array(W, "fc.weight"), numpy_helper.from_array(B, "fc.bias")]
    graph = helper.make_graph(nodes, "mlp", [x], [y, z], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _reference(model: onnx.ModelProto, **feeds: np.ndarray) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds)


def test_wildcard_batch_numpy_in_and_out() -> None:
    model = _mlp()
    compiled = sol.optimize(model, np.zeros((2, 2, 2), np.float32))
    assert str(compiled.compiled.input_specs[0].shape[0]) == "N"
    for batch in (1, 5):
        x = RNG.standard_normal((batch, 2, 2)).astype(np.float32)
        y, z = compiled(x)
        ry, rz = _reference(model, x=x)
        np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(z, rz, rtol=1e-5, atol=1e-6)
        (only_z,) = compiled.run(["z"], {"x": x})
        np.testing.assert_allclose(only_z, rz, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize(("policy", "sizes"), [("not_larger", [3, 5]), ("not_smaller", [3, 4])])
def test_resize_keep_aspect_ratio_with_rounded_up_sizes(mode: str, policy: str, sizes: list[int]) -> None:
    """4x6 -> scale 0.75: the output is round-half-up(4.5) = 5 wide, one more than a resize by scale 0.75."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, axes=[2, 3],
                            keep_aspect_ratio_policy=policy)
    sizes_init = numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes")
    model = helper.make_model(helper.make_graph([node], "resize", [x], [y], [sizes_init]),
                              opset_imports=[helper.make_opsetid("", 19)])
    data = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)
    (want,) = _reference(model, x=data)
    assert want.shape == (1, 2, 3, 5)
    got = sol.optimize(model, data)(data)  # one output: an array
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_path_keyword_inputs_and_single_output(tmp_path) -> None:
    model = _mlp()
    del model.graph.output[1]
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    compiled = sol.optimize(str(path), sol.input([0, 2, 2]))
    x = RNG.standard_normal((3, 2, 2)).astype(np.float32)
    y = compiled(x=x)
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, _reference(model, x=x)[0], rtol=1e-5, atol=1e-6)


def test_parameters_keep_onnx_names_and_can_be_replaced() -> None:
    compiled = sol.optimize(_mlp(), np.zeros((1, 2, 2), np.float32))
    assert set(compiled.params) == {"fc.weight", "fc.bias"}
    x = RNG.standard_normal((2, 2, 2)).astype(np.float32)
    compiled.params["fc.bias"] = np.full(3, 100.0, np.float32)
    y, _ = compiled(x)
    np.testing.assert_allclose(y, x.reshape(2, 4) @ W.T + 100.0, rtol=1e-5)
    with pytest.raises(SolInputError, match="shape"):
        compiled.params["fc.bias"] = np.zeros(4, np.float32)


def test_shape_arithmetic_folds_at_import() -> None:
    """Shape -> Gather -> Concat -> Reshape on a symbolic batch: fixed by the example instead."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zeros"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array([0], np.int64), "zeros"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    model = helper.make_model(helper.make_graph(nodes, "flat", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])
    compiled = sol.optimize(model, np.ones((4, 3, 2), np.float32))
    assert not any(layer.op == "gather" for layer in compiled.compiled.graph.layers)
    data = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    np.testing.assert_array_equal(compiled(data), data.reshape(4, 6))


def test_unsupported_op_names_node_op_and_opset() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    node = helper.make_node("Det", ["x"], ["y"], name="the_det")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(SolUnsupportedError, match=r"'the_det' \(Det, opset 17\)"):
        sol.optimize(model, np.ones((2, 2), np.float32))


def test_wrong_input_dtype_is_a_sol_error() -> None:
    compiled = sol.optimize(_mlp(), np.zeros((1, 2, 2), np.float32))
    with pytest.raises(SolInputError, match="float32"):
        compiled(np.zeros((1, 2, 2), np.float64))


def test_import_sol_onnx() -> None:
    import sol.onnx as sol_onnx

    assert sol_onnx.optimize is sol.optimize


def test_import_sol_onnx_without_the_frontend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sol_frontend_onnx", None)
    monkeypatch.delitem(sys.modules, "sol.onnx", raising=False)
    with pytest.raises(ImportError, match="pip install sol-frontend-onnx"):
        importlib.import_module("sol.onnx")


def test_bench_load(tmp_path) -> None:
    from sol_frontend_onnx import bench

    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), path)
    feeds = bench.example_inputs(path, batch_size=3)
    assert feeds["x"].shape == (3, 2, 2)
    model = bench.load(path, feeds)
    y, _ = model.run(None, feeds)
    np.testing.assert_allclose(y, _reference(_mlp(), **feeds)[0], rtol=1e-5, atol=1e-6)
