"""The onnx frontend is discovered and recognises ONNX models."""

import onnx
from onnx import TensorProto, helper
from sol.plugins import registry


def _tiny_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))


def test_discovered():
    info = [p for p in registry().plugins() if p.kind == "frontend" and p.name == "onnx"]
    assert info and info[0].status == "ok", info
    assert info[0].distribution == "sol-frontend-onnx"


def test_accepts_onnx_models_only(tmp_path):
    frontend = registry().frontends["onnx"]
    model = _tiny_model()
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    assert frontend.accepts(model) and frontend.accepts(path) and frontend.accepts(str(path))
    assert not frontend.accepts(object()) and not frontend.accepts("weights.pt")


def test_versions_report_onnx():
    versions = registry().frontends["onnx"].versions()
    assert versions["onnx"] == onnx.__version__
    assert int(versions["onnx-opset"]) >= 7
