"""sol.deploy for x86: zoo models as shared and static libraries, driven by a C program, vs PyTorch eager."""

from __future__ import annotations

import pytest
from sol.testing.deployment import assert_deploys_correctly, scratch_directory, tiny_graph, zoo_and_torch
from sol_backend_x86.flavour import onednn_paths

scratch = pytest.fixture(scratch_directory, name="scratch")

#: (model, library kind, options); the MLP embeds 570 MB of weights, so only one of its builds is in the default set
SHIP = {"x86::onednn": "ship"}
CASES = [
    pytest.param("resnet18", "shared", {}, id="resnet18-shared"),
    pytest.param("mobilenet_v2", "static", SHIP, id="mobilenet_v2-static-onednn"),
    pytest.param("mlp", "static", {}, id="mlp-static"),
    pytest.param("resnet18", "static", {"weights": "file"}, id="resnet18-static-weights-file", marks=pytest.mark.slow),
    pytest.param("resnet18", "shared", SHIP, id="resnet18-shared-onednn", marks=pytest.mark.slow),
    pytest.param("mobilenet_v2", "shared", {}, id="mobilenet_v2-shared", marks=pytest.mark.slow),
    pytest.param("mlp", "shared", {"weights": "file"}, id="mlp-shared-weights-file", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("name", "kind", "options"), CASES)
def test_deployed_zoo_model_matches_eager(name, kind, options, scratch):
    if options.get("x86::onednn") == "ship" and onednn_paths() is None:
        pytest.skip("oneDNN with headers is not installed (pip install onednn onednn-devel)")
    zoo, torch = zoo_and_torch()
    model, example = zoo.build(name)
    with torch.no_grad():
        expected = [model(example).numpy()]
    result = assert_deploys_correctly(model, example, expected, scratch, device="x86", target=f"lib::{kind}",
                                      options=options)
    assert "-march=native" in result.compile_flags
    assert (result.weights is not None) == (options.get("weights") == "file")
    if options.get("x86::onednn") == "ship":
        (shipped,) = result.shipped
        assert shipped.name.startswith("libdnnl.so") and shipped.parent == result.library.parent
        assert "oneDNN" in result.notes[0] and "shipped" in result.notes[0]
    else:
        assert not result.shipped and "oneDNN is avoided" in result.notes[0]
        assert not any("dnnl" in lib for lib in result.runtime_libraries)


def test_unknown_onednn_mode_is_refused(tmp_path):
    import sol
    from sol.errors import SolInputError

    with pytest.raises(SolInputError, match="x86::onednn='static'"):
        sol.deploy(tiny_graph(), device="x86", path=tmp_path, options={"x86::onednn": "static"})


def test_deploy_takes_a_shape_instead_of_a_tensor(tmp_path):
    _, torch = zoo_and_torch()
    small = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU(), torch.nn.Linear(8, 3)).eval()
    x = torch.randn(2, 16)
    with torch.no_grad():
        expected = [small(x).numpy()]
    import sol

    result = sol.deploy(small, [2, 16], device="x86", path=tmp_path, func_name="tiny", lib_name="libtiny",
                        options={"gcc::march": "x86-64-v2", "gcc::mtune": "generic"})
    assert "-march=x86-64-v2" in result.compile_flags
    from sol.testing.deployment import run_deployed

    (got,), _ = run_deployed(result, [x.numpy()], tmp_path)
    torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(expected[0]), rtol=1e-4, atol=1e-5)


def test_onnx_model_with_a_symbolic_batch(tmp_path):
    onnx = pytest.importorskip("onnx", reason="ONNX models need the onnx package (installed with sol-frontend-onnx)")
    pytest.importorskip("sol_frontend_onnx", reason="ONNX models need sol-frontend-onnx")
    import numpy as np
    import sol
    from onnx import TensorProto, helper, numpy_helper
    from sol.testing.deployment import run_deployed

    rng = np.random.default_rng(0)
    weight, bias = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1), helper.make_node("Relu", ["y"], ["z"])],
        "gemm_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((3, 8)).astype(np.float32)
    result = sol.deploy(model, x, device="x86", path=tmp_path)
    assert result.inputs[0].shape == (3, 8) and onnx is not None
    (got,), _ = run_deployed(result, [x], tmp_path)
    np.testing.assert_allclose(got, np.maximum(x @ weight.T + bias, 0), rtol=1e-4, atol=1e-5)
