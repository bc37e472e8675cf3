"""Training gradients of a model checked against float64, with eager PyTorch's own float32 error as the yardstick.

One step (forward, cross entropy on random targets, backward) runs four ways on copies of one model:
float64 eager (the exact gradients; see `float64_reference`), float32 eager in PyTorch's default layout, float32 eager in
channels-last, and SOL. A run's error is that of its worst parameter,

    max |g - g64| / max |g64|      over the parameters whose max |g64| is at least 1e-3 of the model's largest,

and SOL passes when its error is within ``factor`` times eager float32's.

Why two eager runs make the yardstick: a ReLU whose float64 input lies within float32 rounding of 0 can land
on either side of it in a float32 run, and the side decides whether its gradient passes. Batch norm over a
few values (a 2x2 map at batch 8) spreads one such element's gradient over its channel, so a single flip
can move a parameter's gradient by 1-20%. Which elements flip depends on the summation order of the
convolutions before it: PyTorch's default layout and its channels-last layout are equally correct and
flip different elements. Taking the larger of their two errors measures what float32 itself allows for
that model and input; either one alone is sometimes 10^4 times smaller by luck.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from . import zoo

#: parameters whose exact gradient is below this share of the model's largest are not compared (their
#: relative error is dominated by the rounding of much larger terms)
SMALL_GRADIENT = 1e-3
#: SOL passes when its error is within this many times eager float32's
FACTOR = 3.0


@dataclass(frozen=True)
class GradientError:
    """The worst parameter of one run: its relative error against float64 and its name."""

    error: float
    parameter: str

    def __str__(self) -> str:
        return f"{self.error:.1e} ({self.parameter})"


@dataclass(frozen=True)
class GradientReport:
    model: str
    sol: GradientError
    #: eager float32 in the model's own layout, and in channels-last
    eager: GradientError
    eager_channels_last: GradientError
    #: SOL compiled in float64 against eager float64 (None when not run): tests the gradient rules alone
    sol_float64: GradientError | None = None

    @property
    def yardstick(self) -> float:
        """Eager float32's error: the larger of its two layouts' errors."""
        return max(self.eager.error, self.eager_channels_last.error)

    def within(self, factor: float = FACTOR) -> bool:
        return self.sol.error <= factor * self.yardstick

    @classmethod
    def failed(cls, model: str, error: Exception) -> GradientReport:
        """The row of a model SOL could not train: its error is NaN, which is never within any factor."""
        nothing = GradientError(0.0, "")
        return cls(model, GradientError(float("nan"), type(error).__name__), nothing, nothing)


def without_randomness(model: torch.nn.Module) -> torch.nn.Module:
    """Dropout and stochastic depth off: their masks are SOL's own draws, not PyTorch's, so exact comparisons
    need them off (their own tests check the masks)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) or type(module).__name__ == "StochasticDepth":
            module.p = 0.0
        if isinstance(module, torch.nn.MultiheadAttention):
            module.dropout = 0.0
    return model


class ExactHardsigmoid(torch.nn.Module):
    """relu6(x + 3) / 6, whose float64 gradient is exact: PyTorch's own hardsigmoid backward multiplies by
    float32's 1/6 even in float64 (0.16666667163, 3e-8 off), which would make the exact reference inexact."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu6(x + 3.0) / 6.0


def float64_reference(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of ``model`` whose gradients are exact to float64 rounding (see `ExactHardsigmoid`)."""
    exact = copy.deepcopy(model).double()
    for module in list(exact.modules()):
        for name, child in module.named_children():
            if isinstance(child, torch.nn.Hardsigmoid):
                setattr(module, name, ExactHardsigmoid())
    return exact


#: the smallest image each classifier takes (inception_v3 pools a 75 px image down to 1x1)
MIN_IMAGE_SIZE = {"inception_v3": 80}


def classifier_case(name: str, size: int, batch: int, seed: int = 0) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """A zoo classifier with 10 classes (seeded), random images of ``size`` pixels (at least the model's
    `MIN_IMAGE_SIZE`) and random targets: one case of the training sweep."""
    size = max(size, MIN_IMAGE_SIZE.get(name, size))
    torch.manual_seed(seed)
    model = zoo.classifier(name, num_classes=10, image_size=size)
    return model, torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))


def one_step(model: torch.nn.Module, x: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every parameter's gradient (float64 copies) after one cross-entropy step of ``model`` on ``x``."""
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), target).backward()
    return {name: p.grad.detach().double().clone() for name, p in model.named_parameters() if p.grad is not None}


def worst(gradients: dict[str, torch.Tensor], exact: dict[str, torch.Tensor]) -> GradientError:
    """The parameter of ``gradients`` farthest from ``exact`` (relative to its own largest exact gradient)."""
    missing = sorted(set(exact) - set(gradients))
    if missing:
        return GradientError(float("inf"), f"no gradient for {missing[0]}")
    largest = max(float(g.abs().max()) for g in exact.values())
    result = GradientError(0.0, "")
    for name, g64 in exact.items():
        scale = float(g64.abs().max())
        if scale < SMALL_GRADIENT * largest:
            continue
        error = float((gradients[name] - g64).abs().max()) / scale
        if not error <= result.error:  # NaN counts as the worst
            result = GradientError(error, name)
    return result


def check(name: str, model: torch.nn.Module, x: torch.Tensor, target: torch.Tensor,
          optimize: Callable[[torch.nn.Module, torch.Tensor], torch.nn.Module],
          optimize_float64: Callable[[torch.nn.Module, torch.Tensor], torch.nn.Module] | None = None) -> GradientReport:
    """One step of ``model`` (training mode, randomness off) four ways; ``optimize(model, x)`` returns SOL's model."""
    without_randomness(model).train()
    exact = one_step(float64_reference(model), x.double(), target)
    eager = one_step(copy.deepcopy(model), x, target)
    channels_last = x.to(memory_format=torch.channels_last) if x.dim() == 4 else x
    eager_cl = one_step(copy.deepcopy(model).to(memory_format=torch.channels_last), channels_last, target)
    sol_model = optimize(copy.deepcopy(model), x).train()
    sol_float64 = None
    if optimize_float64 is not None:
        sol64 = optimize_float64(copy.deepcopy(model).double(), x.double()).train()
        sol_float64 = worst(one_step(sol64, x.double(), target), exact)
    return GradientReport(name, worst(one_step(sol_model, x, target), exact), worst(eager, exact), worst(eager_cl, exact),
                          sol_float64)


def table(reports: Iterable[GradientReport], factor: float = FACTOR) -> str:
    """The reports as a Markdown table, one row each, with the verdict of `GradientReport.within`."""
    rows = list(reports)
    with_64 = any(r.sol_float64 is not None for r in rows)
    head = ["model", "SOL error (worst parameter)", "eager f32", "eager f32 channels-last", f"within {factor:g}x"]
    if with_64:
        head.insert(4, "SOL f64")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells: list[Any] = [r.model, str(r.sol), f"{r.eager.error:.1e}", f"{r.eager_channels_last.error:.1e}",
                            "yes" if r.within(factor) else "**no**"]
        if with_64:
            cells.insert(4, f"{r.sol_float64.error:.1e}" if r.sol_float64 is not None else "-")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)
