"""PyTorch's TF32 settings as SOL reads them (`sol_frontend_torch.fp32_math`), and every call of a compiled model
running inside them: the settings of the moment, for the host/transparent path and the native one alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sol
import torch
from sol.passes import run_inference_passes
from sol.precision import STRICT, Fp32Math, fp32_math
from sol_frontend_torch import TorchFrontend, device_tensors
from sol_frontend_torch.fp32_math import following_torch, tf32_disabled, torch_fp32_math
from sol_frontend_torch.params import ParamSlots

from .fake_runtime import FakeCompiled

NEW_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")
#: the fp32_precision tree's nodes (PyTorch >= 2.9) as (object, attribute)
TREE = [(torch.backends, "fp32_precision"), (torch.backends.cudnn, "fp32_precision"),
        (getattr(torch.backends.cudnn, "conv", None), "fp32_precision"),
        (getattr(torch.backends.cudnn, "rnn", None), "fp32_precision"), (torch.backends.cuda.matmul, "fp32_precision")]


@pytest.fixture
def torch_settings() -> Iterator[None]:
    """Restores PyTorch's fp32 settings (legacy flags first: they write into the tree, whose values go back last)."""
    legacy = (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    tree = [getattr(node, attr) for node, attr in TREE] if NEW_API else []
    yield
    torch.backends.cudnn.allow_tf32 = legacy[0]
    torch.set_float32_matmul_precision(legacy[1])
    for (node, attr), value in zip(TREE if NEW_API else [], tree, strict=True):
        setattr(node, attr, value)


def test_pytorch_s_defaults_are_tf32_convolutions_and_strict_matmuls(torch_settings):
    assert torch_fp32_math() == Fp32Math(conv_tf32=True, matmul_tf32=False)


def test_the_legacy_flags(torch_settings):
    torch.backends.cudnn.allow_tf32 = False
    assert torch_fp32_math() == STRICT
    torch.backends.cuda.matmul.allow_tf32 = True
    assert torch_fp32_math() == Fp32Math(matmul_tf32=True)
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = False
    assert torch_fp32_math() == Fp32Math(conv_tf32=True)


@pytest.mark.parametrize("precision,tf32", [("highest", False), ("high", True), ("medium", True)])
def test_matmul_precision_medium_counts_as_high(torch_settings, precision, tf32):
    """"medium" lets matmuls use bf16 where a backend has it; CUDA's fp32 matmuls have TF32 at most (ATen maps
    the CUDA node to TF32 for both), so SOL's cuBLAS calls take TF32 for both."""
    torch.set_float32_matmul_precision(precision)
    assert torch_fp32_math().matmul_tf32 is tf32


@pytest.mark.skipif(not NEW_API, reason="PyTorch before 2.9 has no fp32_precision settings")
def test_the_fp32_precision_tree_is_resolved_as_aten_does(torch_settings):
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    # the legacy getter refuses this state (a mix of the two APIs); SOL reads the tree, which ATen's convolution reads
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        _ = torch.backends.cudnn.allow_tf32
    assert torch_fp32_math() == STRICT
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert torch_fp32_math() == Fp32Math(matmul_tf32=True)
    # "none" defers to the parent: the cuDNN node, then the root
    torch.backends.cudnn.conv.fp32_precision = "none"
    torch.backends.cuda.matmul.fp32_precision = "none"
    torch.backends.cudnn.fp32_precision = "none"
    torch.backends.fp32_precision = "tf32"
    assert torch_fp32_math() == Fp32Math(True, True)
    torch.backends.cudnn.fp32_precision = "ieee"
    assert torch_fp32_math() == STRICT, "the CUDA node ('cuda', 'all') covers both, before the root"
    torch.backends.fp32_precision = "none"
    torch.backends.cudnn.fp32_precision = "none"
    assert torch_fp32_math() == STRICT, "nothing set anywhere: IEEE"


# -- every call of a compiled model runs inside the settings of its moment ---------------------------------------------
class _Recording(FakeCompiled):
    """A compiled model that records `sol.precision.fp32_math` as a backend's launch would read it."""

    def __init__(self, graph: Any) -> None:
        super().__init__(graph)
        self.seen: list[Fp32Math] = []

    def run(self, *args: Any) -> None:
        self.seen.append(fp32_math())
        super().run(*args)

    # the native path's calls (device_tensors.run), on host memory standing in for a device's
    def prepare_on_device(self, addresses: list[int], queue: Any = None) -> None:
        self.seen.append(fp32_math())

    def run_on_device(self, inputs: list[int], outputs: list[int], batch: int, queue: Any = None) -> Any:
        self.seen.append(fp32_math())
        return None

    def finish(self, launch: Any) -> None:
        assert fp32_math() == STRICT, "the settings hold for the launches, not after the call"


def _model_and_compiled(frontend: TorchFrontend) -> tuple[torch.nn.Module, _Recording]:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU()).eval()
    graph = run_inference_passes(frontend.parse(model, (sol.input([0, 3, 6, 6]),)))
    return model, _Recording(graph)


def test_a_module_call_runs_with_the_settings_of_that_call(frontend, torch_settings):
    model, compiled = _model_and_compiled(frontend)
    wrapped = frontend.wrap(model, compiled)
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        wrapped(x)
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = True
        wrapped(x)
    assert compiled.seen == [Fp32Math(conv_tf32=True), Fp32Math(matmul_tf32=True)]
    assert fp32_math() == STRICT


def test_a_native_call_runs_with_the_settings_of_that_call(frontend, torch_settings):
    model, compiled = _model_and_compiled(frontend)
    params = device_tensors.DeviceParams(ParamSlots(model, compiled.param_names))
    x, y = torch.randn(1, 3, 6, 6), torch.empty(1, 4, 6, 6)
    torch.backends.cudnn.allow_tf32 = False
    device_tensors.run(compiled, params, [x], [y], 1, x.device)
    assert compiled.seen == [STRICT, STRICT], "the parameters' prepare and the forward"
    torch.backends.cudnn.allow_tf32 = True
    device_tensors.run(compiled, params, [x], [y], 1, x.device)
    assert compiled.seen[2:] == [Fp32Math(conv_tf32=True)], "the parameters did not change: the forward only"
    with following_torch():
        assert fp32_math() == Fp32Math(conv_tf32=True)


@pytest.mark.parametrize("start", ["defaults", "both on", "root tf32"])
def test_tf32_disabled_turns_both_off_and_restores_them(torch_settings, start):
    if start == "both on":
        torch.set_float32_matmul_precision("high")
    elif start == "root tf32":
        if not NEW_API:
            pytest.skip("PyTorch before 2.9 has no fp32_precision settings")
        # the legacy cudnn.allow_tf32 = False alone would not switch convs off (it leaves "none", deferring to the root)
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.fp32_precision = "tf32"
    before = torch_fp32_math()
    tree = [getattr(node, attr) for node, attr in TREE] if NEW_API else []
    with tf32_disabled():
        assert torch_fp32_math() == STRICT
        # PyTorch's legacy readers (torch.export's, ATen's cuBLAS calls) accept the state: its records agree
        assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False
    assert torch_fp32_math() == before
    assert [getattr(node, attr) for node, attr in TREE] == tree if NEW_API else True
