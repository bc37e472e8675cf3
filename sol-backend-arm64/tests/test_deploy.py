"""sol.deploy for ARM64: cross-compiled libraries run under qemu-aarch64, vs PyTorch eager.

Needs ``g++-aarch64-linux-gnu`` and ``qemu-user`` (CI installs both; without
them these tests are skipped, naming the package). qemu runs the code about
an order of magnitude slower than the host, so the bigger models are in the
slow set; mobilenet_v2 stays in the default set.
"""

from __future__ import annotations

import shutil

import pytest
import sol
from sol.errors import SolBuildError
from sol.testing.deployment import assert_deploys_correctly, scratch_directory, tiny_graph, zoo_and_torch
from sol_backend_arm64.deploy import CROSS_PACKAGE, QEMU_PACKAGE, Arm64DeployTarget, native

scratch = pytest.fixture(scratch_directory, name="scratch")

TARGET = Arm64DeployTarget()
needs_toolchain = pytest.mark.skipif(
    shutil.which(TARGET.compiler()[0]) is None or (not native() and shutil.which((TARGET.emulator() or ["?"])[0]) is None),
    reason=f"the ARM64 toolchain is not installed: {CROSS_PACKAGE}; {QEMU_PACKAGE}",
)

CASES = [
    pytest.param("mobilenet_v2", "shared", {}, id="mobilenet_v2-shared"),
    pytest.param("resnet18", "static", {}, id="resnet18-static", marks=pytest.mark.slow),
    pytest.param("mlp", "shared", {"weights": "file"}, id="mlp-shared-weights-file", marks=pytest.mark.slow),
    pytest.param("mobilenet_v2", "static", {"gcc::march": "armv8.2-a"}, id="mobilenet_v2-static-armv8.2",
                 marks=pytest.mark.slow),
]


@needs_toolchain
@pytest.mark.parametrize(("name", "kind", "options"), CASES)
def test_deployed_zoo_model_matches_eager_under_emulation(name, kind, options, scratch):
    zoo, torch = zoo_and_torch()
    model, example = zoo.build(name)
    with torch.no_grad():
        expected = [model(example).numpy()]
    result = assert_deploys_correctly(model, example, expected, scratch, device="arm64", target=f"lib::{kind}",
                                      options=options)
    if not native():
        assert "-march=" + options.get("gcc::march", "armv8-a") in result.compile_flags
    header = result.header.read_text()
    assert "Target:  arm64" in header and "void sol_predict(void* ctx, const float* in0, float** out0);" in header


def test_missing_cross_compiler_names_the_package(tmp_path):
    sol.config["arm64::cxx"] = "aarch64-nowhere-linux-gnu-g++"
    try:
        with pytest.raises(SolBuildError, match="aarch64-nowhere-linux-gnu-g\\+\\+.*apt install g\\+\\+-aarch64-linux-gnu"):
            sol.deploy(tiny_graph(), device="arm64", path=tmp_path)
    finally:
        del sol.config["arm64::cxx"]


def test_cross_binutils_follow_the_compiler():
    sol.config["arm64::cxx"] = "/opt/cross/bin/aarch64-none-linux-gnu-g++"
    try:
        assert TARGET.tool("objcopy") == "aarch64-none-linux-gnu-objcopy"
    finally:
        del sol.config["arm64::cxx"]
