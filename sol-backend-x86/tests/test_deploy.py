"""sol.deploy for x86: zoo models as shared and static libraries, driven by a C program, vs PyTorch eager."""

from __future__ import annotations

import pytest
from sol.testing.deployment import assert_deploys_correctly
from sol_backend_x86.flavour import onednn_paths

torch = pytest.importorskip("torch", reason="the zoo models need PyTorch (installed with sol-frontend-torch)")
zoo = pytest.importorskip("sol_frontend_torch.zoo", reason="the zoo models come with sol-frontend-torch")

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
def test_deployed_zoo_model_matches_eager(name, kind, options, tmp_path):
    if options.get("x86::onednn") == "ship" and onednn_paths() is None:
        pytest.skip("oneDNN with headers is not installed (pip install onednn onednn-devel)")
    model, example = zoo.build(name)
    with torch.no_grad():
        expected = [model(example).numpy()]
    result = assert_deploys_correctly(model, example, expected, tmp_path, device="x86", target=f"lib::{kind}",
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
        sol.deploy(torch.nn.ReLU(), [1, 4], device="x86", path=tmp_path, options={"x86::onednn": "static"})


def test_deploy_takes_a_shape_instead_of_a_tensor(tmp_path):
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
