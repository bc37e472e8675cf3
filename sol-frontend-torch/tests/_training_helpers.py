"""Shared by the training tests: small zoo configurations and gradient comparisons against eager PyTorch."""

from __future__ import annotations

import copy

import torch
from sol_frontend_torch import gradient_check, zoo


def small_model(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    """A zoo model at CI size (images 64x64, batch 2; small MLP / encoder), dropout off for exact comparisons."""
    torch.manual_seed(0)
    if name == "mlp":
        model, x = zoo.mlp(64, 10), torch.randn(4, 64)
    elif name == "transformer_encoder":
        model, x = zoo.transformer_encoder(2, 32, 4, 64), torch.randn(2, 8, 32)
    else:
        model, x = zoo.MODELS[name][0](), torch.randn(2, 3, 64, 64)
    without_dropout(model)
    return model.train(), x


def without_dropout(model: torch.nn.Module) -> None:
    """Dropout masks are SOL's own (not PyTorch's), so gradient comparisons switch it off."""
    gradient_check.without_randomness(model)


def eager_reference(model: torch.nn.Module, x: torch.Tensor) -> torch.nn.Module:
    """A float64 copy after one step of the same loss: the exact gradients (float32 eager has its own rounding)."""
    reference = copy.deepcopy(model).double()
    step_loss(reference(x.double())).backward()
    return reference


def step_loss(out: torch.Tensor) -> torch.Tensor:
    return out.square().mean()


def assert_gradients_match(model: torch.nn.Module, reference: torch.nn.Module, rtol: float = 1e-3, atol: float = 1e-4) -> None:
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad.double(), q.grad, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


def assert_buffers_match(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    for (name, a), (_, b) in zip(model.named_buffers(), reference.named_buffers(), strict=True):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def loss_curve(net: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_of, steps: int = 50) -> list[float]:  # type: ignore[no-untyped-def]
    """The loss of each of ``steps`` optimizer steps; ``loss_of(net)`` computes one step's loss."""
    curve = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_of(net)
        loss.backward()
        optimizer.step()
        curve.append(loss.item())
    return curve
