"""A model optimized again skips torch.export (sol.graph_cache), and never reuses a graph that no longer fits."""

from __future__ import annotations

from pathlib import Path

import pytest
import sol
import torch
from sol_frontend_torch import capture as capture_module
from sol_frontend_torch.fingerprint import fingerprint


class Scaled(torch.nn.Module):
    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * self.scale


class Pair(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        y = self.fc(x)
        return y, {"twice": y * 2}


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOL_CACHE_DIR", str(tmp_path / "cache"))


def _count_captures(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = capture_module.capture

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(capture_module, "capture", counting)
    return calls


def _check(model: torch.nn.Module, x: torch.Tensor) -> None:
    optimized = sol.optimize(model, x)
    with torch.no_grad():
        want, got = model(x), optimized(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_second_optimize_of_an_equal_model_skips_the_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_captures(monkeypatch)
    x = torch.randn(3, 8)
    _check(Scaled().eval(), x)
    assert len(calls) == 1
    _check(Scaled().eval(), x)  # new weights, same structure: the cached graph reads the new weights
    assert len(calls) == 1


def test_output_structure_survives_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_captures(monkeypatch)
    x = torch.randn(2, 8)
    sol.optimize(Pair().eval(), x)
    model = Pair().eval()
    y, extra = sol.optimize(model, x)(x)
    assert len(calls) == 1
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(y, want[0])
    torch.testing.assert_close(extra["twice"], want[1]["twice"])


def test_changed_attribute_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_captures(monkeypatch)
    x = torch.randn(3, 8)
    _check(Scaled(2.0).eval(), x)
    _check(Scaled(3.0).eval(), x)  # the scale is baked into the graph: a stale graph would be wrong
    assert len(calls) == 2


def test_changed_forward_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_captures(monkeypatch)
    x = torch.randn(3, 8)
    _check(Scaled().eval(), x)

    def forward(self: Scaled, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.fc(x)) + self.scale

    monkeypatch.setattr(Scaled, "forward", forward)
    _check(Scaled().eval(), x)
    assert len(calls) == 2


def test_changed_input_shape_is_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_captures(monkeypatch)
    model = Scaled().eval()
    _check(model, torch.randn(3, 8))
    _check(model, torch.randn(5, 8))
    assert len(calls) == 2


def test_plain_tensor_attributes_count_by_value() -> None:
    a, b = Scaled(), Scaled()
    a.offset = torch.zeros(4)  # a plain attribute: torch.export bakes it into the graph as a constant
    b.offset = torch.ones(4)
    x = torch.randn(1, 8)
    assert fingerprint(a, (x,), None) != fingerprint(b, (x,), None)


def test_what_cannot_be_described_is_not_fingerprinted() -> None:
    x = torch.randn(1, 8)
    model = Scaled()
    assert fingerprint(model, (x,), None) is not None
    handle = model.fc.register_forward_hook(lambda module, args, out: out * 2)
    assert fingerprint(model, (x,), None) is None
    handle.remove()
    model.strange = object()  # forward might read it, and it has no faithful description
    assert fingerprint(model, (x,), None) is None


_FINGERPRINT_SCRIPT = """
import torch
from sol_frontend_torch.fingerprint import fingerprint
from sol_frontend_torch.zoo import import_torchvision
model = import_torchvision().models.squeezenet1_1()
print(fingerprint(model, (torch.randn(1, 3, 64, 64),), None))
"""


def test_fingerprint_is_the_same_in_every_process() -> None:
    # a fresh process (other string hashing, other reference counts) must find the record the first one stored
    import os
    import subprocess
    import sys

    prints = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", _FINGERPRINT_SCRIPT], capture_output=True, text=True, env=env,
                              check=True)
        prints.add(done.stdout.strip().splitlines()[-1])
    assert len(prints) == 1 and "None" not in prints
