"""The zoo's classifiers train with gradients as accurate as eager PyTorch's (`sol_frontend_torch.gradient_check`).

Each case: 10 classes, random weights, one cross-entropy step at two small resolutions (64 px at batch 8,
96 px at batch 4; CI runs its fast models at 64 px only), dropout and stochastic depth off. Two checks per case:

- SOL float32 within 3x of eager float32's error against float64 (the larger of eager's two layouts' errors:
  at these sizes a ReLU input within rounding of 0 makes single runs differ by up to 10^4, see the module);
- SOL compiled in float64 equal to eager float64 to 1e-9: no rounding to hide behind, so a wrong gradient
  rule, a wrong kernel or a wrong layout fails here whatever float32 does.

The fast part runs in CI; `benchmarks/train_sweep.py` prints the same sweep as a table.
"""

from __future__ import annotations

import pytest
import sol
import torch
from sol_frontend_torch import gradient_check, zoo

from . import _benchmark_scripts

SWEEP = _benchmark_scripts.BENCHMARKS / "train_sweep.py"

#: CI's models. mnasnet1_0 trains in the slow set: its layers (dense and depthwise 3x3 and 5x5 convolutions with
#: batch norm and ReLU, inverted residuals, a linear head) are all in mobilenet_v3_small's and resnet18's cases.
FAST = ["resnet18", "squeezenet1_1", "mobilenet_v3_small", "shufflenet_v2_x1_0"]
SLOW = [name for name in zoo.CLASSIFIERS if name not in FAST]
#: the sweep's sizes (64 px halves down to 2x2 maps, 96 px down to 3x3), for the slow set and train_sweep.py
SIZES = [(64, 8), (96, 4)]
#: CI's one size for the fast models (96 px runs in the slow set): at 64 px eager's own float32 error is small, so
#: the float32 check is at its strictest (at 80 px it let a 1% skew of resnet18's first weight gradient pass); odd
#: maps under stride 2 are in squeezenet1_1's case (ceil-mode pools: 31, 15, 7, 3)
CI_SIZES = [(64, 8)]
#: float64 SOL against float64 eager: summation order only (errors of 1e-14 seen)
FLOAT64_TOLERANCE = 1e-9


def _check(name: str, size: int, batch: int) -> None:
    model, x, target = gradient_check.classifier_case(name, size, batch)
    report = gradient_check.check(f"{name} {size}px b{batch}", model, x, target, sol.optimize, sol.optimize)
    assert report.sol_float64 is not None and report.sol_float64.error <= FLOAT64_TOLERANCE, report
    assert report.within(3.0), gradient_check.table([report])


@pytest.mark.parametrize(("size", "batch"), CI_SIZES)
@pytest.mark.parametrize("name", FAST)
def test_classifier_gradients(name: str, size: int, batch: int) -> None:
    _check(name, size, batch)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "size", "batch"),
                         [(name, size, batch) for name in FAST + SLOW for size, batch in SIZES
                          if name in SLOW or (size, batch) not in CI_SIZES])
def test_classifier_gradients_slow(name: str, size: int, batch: int) -> None:
    _check(name, size, batch)


def test_worst_parameter_skips_small_gradients_and_names_the_worst() -> None:
    exact = {"a": torch.tensor([1.0, -2.0]), "b": torch.tensor([1e-5]), "c": torch.tensor([0.5])}
    got = {"a": torch.tensor([1.0, -2.02]), "b": torch.tensor([1.0]), "c": torch.tensor([0.5 + 1e-6])}
    worst = gradient_check.worst(got, exact)
    assert worst.parameter == "a" and worst.error == pytest.approx(0.01)  # b's gradient is below 1e-3 of 2: skipped
    assert gradient_check.worst({"a": exact["a"]}, exact).error == float("inf")  # a missing gradient is the worst
    nan = gradient_check.worst({**got, "c": torch.tensor([float("nan")])}, exact)
    assert nan.parameter == "c"


def test_yardstick_is_the_larger_eager_error() -> None:
    e = gradient_check.GradientError
    report = gradient_check.GradientReport("m", e(3e-3, "w"), e(1e-6, "x"), e(2e-3, "y"))
    assert report.yardstick == 2e-3 and report.within(3.0)
    assert not gradient_check.GradientReport("m", e(7e-3, "w"), e(1e-6, "x"), e(2e-3, "y")).within(3.0)
    assert "**no**" in gradient_check.table([gradient_check.GradientReport("m", e(7e-3, "w"), e(1e-6, "x"), e(2e-3, "y"))])


def test_a_wrong_gradient_is_caught() -> None:
    """The check is not vacuous: a SOL model whose weight gradient is off by 1% fails both criteria."""

    def skewed(model: torch.nn.Module, x: torch.Tensor) -> torch.nn.Module:
        optimized = sol.optimize(model, x)
        first = next(optimized.parameters())
        first.register_hook(lambda g: g * 1.01)
        return optimized

    (size, batch), = CI_SIZES  # the fast resnet18 case's shapes: its compiled steps are loaded from the run's cache
    model, x, target = gradient_check.classifier_case("resnet18", size, batch)
    report = gradient_check.check("resnet18", model, x, target, skewed, skewed)
    assert report.sol_float64 is not None and report.sol_float64.error > FLOAT64_TOLERANCE
    assert not report.within(3.0)


@pytest.mark.skipif(not SWEEP.is_file(), reason="benchmarks/train_sweep.py is not in this checkout")
def test_sweep_script_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert _benchmark_scripts.load("train_sweep").main(["--models", "squeezenet1_1", "--sizes", "64:2"]) == 0
    out = capsys.readouterr().out
    assert "| squeezenet1_1 64px b2 |" in out and "1 of 1 within 3x" in out


def test_float64_reference_has_exact_hardsigmoid_gradients() -> None:
    """PyTorch's float64 hardsigmoid backward uses float32's 1/6; the reference replaces it with an exact one."""

    def slope(activation: torch.nn.Module) -> float:
        x = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
        activation(x).sum().backward()
        return x.grad.item()

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Hardsigmoid())
    assert slope(model[1]) == 0.1666666716337204  # PyTorch's own: float32's 1/6
    assert slope(gradient_check.float64_reference(model)[1]) == 1 / 6
