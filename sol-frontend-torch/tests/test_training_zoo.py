"""The zoo trains with SOL: one step's gradients and BatchNorm statistics match eager PyTorch (float64 reference).

CI sizes: images 64x64 at batch 2, a small MLP and encoder; the big models are `slow`.
"""

from __future__ import annotations

import copy

import pytest
import sol
import torch
from sol_frontend_torch import zoo

from ._training_helpers import (
    assert_buffers_match,
    assert_gradients_match,
    eager_reference,
    loss_curve,
    small_model,
    step_loss,
    without_dropout,
)

FAST = ["resnet18", "squeezenet1_1", "mlp", "transformer_encoder"]
SLOW = ["mobilenet_v2", "densenet121"]


#: mobilenet_v2's batch-2 BatchNorms over 2x2 pixels amplify float32 rounding: eager float32 itself is 1.7e-3 off the
#: float64 gradients there; SOL, whose weight gradients are oneDNN's float32 backward-weights like eager's, 1.4e-3
ATOL = {"mobilenet_v2": 2e-3}


def _one_step(name: str) -> None:
    model, x = small_model(name)
    reference = eager_reference(model, x)  # also updates its BatchNorm statistics once, in float64
    sol_model = sol.optimize(model, x).train()
    step_loss(sol_model(x)).backward()
    assert_gradients_match(model, reference, atol=ATOL.get(name, 1e-4))
    assert_buffers_match(model, reference)


@pytest.mark.parametrize("name", FAST)
def test_zoo_gradients(name: str) -> None:
    _one_step(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_zoo_gradients_slow(name: str) -> None:
    _one_step(name)


@pytest.mark.parametrize("name", ["mlp", "transformer_encoder"])
def test_zoo_sgd_curve(name: str) -> None:
    model, x = small_model(name)
    eager = copy.deepcopy(model)
    sol_model = sol.optimize(model, x).train()
    curves = [loss_curve(net, torch.optim.SGD(net.parameters(), lr=0.01), lambda n: step_loss(n(x)))
              for net in (sol_model, eager)]
    torch.testing.assert_close(torch.tensor(curves[0]), torch.tensor(curves[1]), rtol=1e-3, atol=0)


def _trains_as_accurately_as_eager(name: str) -> None:
    """50 SGD steps of a CNN (cross entropy, batch 4, 64x64) with SOL, eager float32 and eager float64.

    BatchNorm over 4 images makes these curves sensitive to rounding: eager float32 itself drifts up to a few
    percent from float64 over 50 steps on resnet18, so "within 1e-3 of eager" cannot hold for any float32
    implementation there. What must hold: SOL stays as close to the float64 curve and statistics as eager
    float32 does (or within 1e-3), and its trained weights, copied into plain PyTorch, give its eval outputs.
    Eager float32 runs in its default layout and in channels-last, and the farther of the two is the yardstick:
    which ReLU inputs near 0 round to which side depends on the summation order, so one layout alone can be
    lucky (`sol_frontend_torch.gradient_check`); resnet18 drifted 2.7% in the default layout and 5.8% with SOL.
    """
    torch.manual_seed(0)
    model = zoo.MODELS[name][0]()
    without_dropout(model)
    model.train()
    x, target = torch.randn(4, 3, 64, 64), torch.randint(0, 1000, (4,))
    nets = {"sol": sol.optimize(model, x).train(), "f32": copy.deepcopy(model),
            "f32_cl": copy.deepcopy(model).to(memory_format=torch.channels_last), "f64": copy.deepcopy(model).double()}
    curves = {}
    for tag, net in nets.items():
        inputs = {"f64": x.double(), "f32_cl": x.to(memory_format=torch.channels_last)}.get(tag, x)
        curve = loss_curve(net, torch.optim.SGD(net.parameters(), lr=0.001),
                           lambda n, i=inputs: torch.nn.functional.cross_entropy(n(i), target))
        curves[tag] = torch.tensor(curve, dtype=torch.float64)

    def drift(tag: str) -> float:
        return float(((curves[tag] - curves["f64"]).abs() / curves["f64"].abs()).max())

    eager_drift = max(drift("f32"), drift("f32_cl"))
    assert drift("sol") <= max(1e-3, 2 * eager_drift), (drift("sol"), drift("f32"), drift("f32_cl"))
    buffers = {tag: dict(net.named_buffers()) for tag, net in (("sol", model), ("f32", nets["f32"]),
                                                                ("f32_cl", nets["f32_cl"]), ("f64", nets["f64"]))}
    for name_, exact in buffers["f64"].items():
        if not exact.is_floating_point():
            assert torch.equal(buffers["sol"][name_].long(), exact.long()), name_
            continue
        sol_error = float((buffers["sol"][name_].double() - exact).abs().max())
        f32_error = max(float((buffers[tag][name_].double() - exact).abs().max()) for tag in ("f32", "f32_cl"))
        assert sol_error <= max(1e-4, 2 * f32_error), (name_, sol_error, f32_error)
    plain = copy.deepcopy(nets["f32"])
    plain.load_state_dict(nets["sol"].state_dict())
    with torch.no_grad():
        torch.testing.assert_close(plain.eval()(x), nets["sol"].eval()(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["resnet18", "squeezenet1_1"])
def test_cnn_trains_as_accurately_as_eager(name: str) -> None:
    _trains_as_accurately_as_eager(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_cnn_trains_as_accurately_as_eager_slow(name: str) -> None:
    _trains_as_accurately_as_eager(name)
