"""Recurrent layers in the generated code of the other devices: ARM64 (deployed, run under qemu-aarch64)
and the emulated SX-Aurora VE (``SOL_VE_EMULATE=1``, inference and training through transparent offloading).

Neither has oneDNN: the input projections are SOL's generated GEMMs and the recurrences its time loops, so a
bidirectional 2-layer LSTM/GRU/RNN tagger exercises every recurrent kernel in each flavour.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator

import pytest
import sol.pytorch as sol
import torch
from sol.testing.deployment import assert_deploys_correctly, scratch_directory
from torch import nn

scratch = pytest.fixture(scratch_directory, name="scratch")


class Tagger(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.rnn = getattr(nn, kind)(4, 6, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])


@pytest.mark.parametrize("kind", ["LSTM", "GRU", pytest.param("RNN", marks=pytest.mark.slow)])
def test_deployed_for_arm64_matches_eager_under_emulation(kind: str, scratch) -> None:  # type: ignore[no-untyped-def]
    arm64 = pytest.importorskip("sol_backend_arm64.deploy", reason="sol-backend-arm64 is not installed")
    target = arm64.Arm64DeployTarget()
    if shutil.which(target.compiler()[0]) is None or (not arm64.native() and
                                                      shutil.which((target.emulator() or ["?"])[0]) is None):
        pytest.skip(f"the ARM64 toolchain is not installed: {arm64.CROSS_PACKAGE}; {arm64.QEMU_PACKAGE}")
    torch.manual_seed(0)
    model, x = Tagger(kind).eval(), torch.randn(2, 5, 4)
    with torch.no_grad():
        expected = [model(x).numpy()]
    assert_deploys_correctly(model, x, expected, scratch, device="arm64", target="lib::shared")


@pytest.fixture
def ve(emulator_dir: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The emulated ve:0 for one test (see test_ve_offload; the emulator is built once per session)."""
    pytest.importorskip("sol_backend_ve", reason="sol-backend-ve is not installed")
    from .test_ve_offload import _forget

    monkeypatch.setenv("SOL_VE_EMULATE", "1")
    monkeypatch.setenv("SOL_VE_EMULATOR_DIR", emulator_dir)
    _forget()
    yield "ve"
    _forget()


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_emulated_ve_inference_and_gradients(kind: str, ve: str) -> None:
    torch.manual_seed(1)
    model, x = Tagger(kind), torch.randn(3, 5, 4)
    model.eval()
    optimized = sol.optimize(model, x, device=ve)
    assert str(optimized.compiled.device) == "ve:0"
    with torch.no_grad():
        torch.testing.assert_close(optimized(x), model(x), rtol=1e-4, atol=1e-5)
    model.train()
    eager = copy.deepcopy(model)
    sol.optimize(model, x, device=ve).train()(x).square().sum().backward()
    eager(x).square().sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
