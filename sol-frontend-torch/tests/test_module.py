"""SolModule: shared parameters, state_dict round trips, prepare on change, input checks, no silent gradients."""

from __future__ import annotations

import copy

import pytest
import sol
import torch
from sol.errors import SolInputError
from sol.passes import run_inference_passes
from sol_frontend_torch import TorchFrontend

from .fake_runtime import FakeCompiled


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.features(x).mean((2, 3))
        return {"logits": self.head(y), "features": y}


def _wrapped(frontend: TorchFrontend) -> tuple[torch.nn.Module, torch.nn.Module, FakeCompiled]:
    model = _Net().eval()
    graph = run_inference_passes(frontend.parse(model, (sol.input([0, 3, 6, 6]),)))
    compiled = FakeCompiled(graph)
    return model, frontend.wrap(model, compiled), compiled


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)


def test_outputs_structure_and_any_batch(frontend: TorchFrontend) -> None:
    model, sol_model, _ = _wrapped(frontend)
    for batch in (1, 5):
        x = torch.randn(batch, 3, 6, 6)
        with torch.no_grad():
            _close(sol_model(x), model(x))


def test_state_dict_round_trip(frontend: TorchFrontend, param_check: str) -> None:
    model, sol_model, compiled = _wrapped(frontend)
    assert sol_model.state_dict().keys() == model.state_dict().keys()
    assert sol_model.features[0].weight is model.features[0].weight  # shared, not copied
    other = _Net().eval()
    other.features[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        sol_model(x)
        calls = compiled.prepare_calls
        sol_model.load_state_dict(other.state_dict())
        _close(sol_model(x), other(x))  # the folded BatchNorm follows the new parameters
        assert compiled.prepare_calls == calls + 1
        sol_model(x)
        assert compiled.prepare_calls == calls + 1  # unchanged parameters: no re-prepare
    fresh = _Net()
    fresh.load_state_dict(sol_model.state_dict())
    _close(fresh.eval()(x), other(x))


def test_wrong_inputs_are_explained(frontend: TorchFrontend) -> None:
    _, sol_model, _ = _wrapped(frontend)
    with torch.no_grad():
        with pytest.raises(SolInputError, match="shape"):
            sol_model(torch.randn(2, 3, 7, 6))
        with pytest.raises(SolInputError, match="float32"):
            sol_model(torch.randn(2, 3, 6, 6, dtype=torch.float64))
        with pytest.raises(SolInputError, match="1 inputs"):
            sol_model(torch.randn(2, 3, 6, 6), torch.randn(2, 3, 6, 6))


def test_backward_in_eval_mode_gives_eager_gradients(frontend: TorchFrontend) -> None:
    model, sol_model, _ = _wrapped(frontend)
    eager = copy.deepcopy(model)
    x = torch.randn(2, 3, 6, 6)
    out = sol_model(x)
    assert out["logits"].requires_grad
    out["logits"].sum().backward()  # compiled lazily: the eval-mode step, activations recomputed
    eager(x)["logits"].sum().backward()
    for p, q in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-6)


def test_gradient_targets_follow_requires_grad_and_reassigned_parameters(frontend: TorchFrontend) -> None:
    """The eval-mode call with autograd on finds the model's parameters once, not per call: a change of
    requires_grad, and a parameter assigned after the first call, must still be seen."""
    model, sol_model, _ = _wrapped(frontend)
    x = torch.randn(2, 3, 6, 6)
    assert sol_model(x)["logits"].requires_grad
    model.requires_grad_(False)
    assert not sol_model(x)["logits"].requires_grad  # no parameter needs gradients: a plain inference call
    model.head.weight.requires_grad_(True)
    sol_model(x)["logits"].sum().backward()
    assert model.head.weight.grad is not None and model.head.bias.grad is None
    replacement = torch.nn.Parameter(model.head.weight.detach().clone())
    model.head.weight = replacement  # a new tensor object: gradients must reach it, not the old one
    sol_model(x)["logits"].sum().backward()
    assert replacement.grad is not None
    eager = copy.deepcopy(model)
    eager.head.weight.grad = None
    eager(x)["logits"].sum().backward()
    torch.testing.assert_close(replacement.grad, eager.head.weight.grad, rtol=1e-3, atol=1e-6)


def test_wrapper_keeps_working_after_deepcopy_of_original(frontend: TorchFrontend, param_check: str) -> None:
    model, sol_model, _ = _wrapped(frontend)
    snapshot = copy.deepcopy(model.state_dict())
    with torch.no_grad():
        model.head.weight.mul_(2.0)  # an in-place change on the original shows through the wrapper
        x = torch.randn(2, 3, 6, 6)
        _close(sol_model(x), model(x))
    model.load_state_dict(snapshot)
