"""Checks of transparent offloading through PyTorch, for any device type with a `sol.records.DeviceRuntime`.

A backend's test suite calls them with its device type (sol-core's loopback
device, sol-backend-ve's emulated VE): CPU tensors in and out, outputs and
gradients as eager PyTorch gives them, per call only inputs and outputs
copied, parameters once and again only after they changed.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sol
import torch
from sol.errors import SolInputError

__all__ = ["ModelCallCopies", "SmallNet", "check_foreign_device_is_refused", "check_inference_and_copies",
           "check_profile_reports_copies", "check_training"]


class SmallNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.AvgPool2d(2)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1))


class ModelCallCopies:
    """A framework's host<->device copy counters read around a model's own calls only, in a real training loop:
    the forward, and inside ``loss.backward()`` the span from the model output's gradient being ready to the last
    parameter gradient accumulated. The loss and the optimizer (which may run on the host through a fallback)
    fall outside. ``read()`` returns the counters (e.g. sol_backend_ve.torch_ve.copy_counters); they are only
    read, never reset, so a caller may count a whole step around this."""

    def __init__(self, model: torch.nn.Module, read: Callable[[], dict[str, int]]) -> None:
        self.read = read
        #: the counts of the last forward, and of the last backward (empty until its gradients arrived)
        self.forward: dict[str, int] = {}
        self.backward: dict[str, int] = {}
        self._backward_start: dict[str, int] = {}
        for p in model.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._gradient_accumulated)

    def call(self, model: torch.nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
        """``model(*inputs)`` (one tensor output), counted."""
        start = self.read()
        out = model(*inputs)
        self.forward = _since(self.read(), start)
        self.backward = {}
        if out.requires_grad:
            out.register_hook(self._output_gradient_ready)
        return out

    def _output_gradient_ready(self, grad: torch.Tensor) -> None:
        self._backward_start = self.read()

    def _gradient_accumulated(self, p: torch.Tensor) -> None:
        self.backward = _since(self.read(), self._backward_start)  # the last parameter's covers the whole backward


def _since(now: dict[str, int], start: dict[str, int]) -> dict[str, int]:
    return {key: value - start.get(key, 0) for key, value in now.items()}


def check_inference_and_copies(device: str) -> None:
    """Outputs match eager; per call only the input and output travel; parameters once, again after they change."""
    torch.manual_seed(0)
    model = SmallNet().eval()
    x = torch.randn(2, 3, 8, 8)
    sol_model = sol.optimize(model, x, device=device)
    compiled = sol_model.compiled
    with torch.no_grad():
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
        before = compiled.transfers.copy()
        for _ in range(3):
            out = sol_model(x)
        assert out.device.type == "cpu"
        spent = compiled.transfers.since(before)
        assert (spent.calls, spent.to_device, spent.to_host, spent.parameters, spent.launches) == (3, 3, 3, 0, 3)
        assert spent.to_device_bytes == 3 * x.numel() * 4 and spent.to_host_bytes == 3 * out.numel() * 4
        model.fc.weight.add_(1.0)  # an in-place change (what an optimizer step does): that one is uploaded again
        before = compiled.transfers.copy()
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
        sol_model(x)
        spent = compiled.transfers.since(before)
        assert (spent.parameters, spent.parameter_bytes) == (1, model.fc.weight.numel() * 4)


def check_training(device: str) -> None:
    """loss.backward() fills the host parameters' .grad as eager does; an optimizer step re-uploads them once."""
    torch.manual_seed(1)
    model = SmallNet().train()
    reference = SmallNet().train()
    reference.load_state_dict(model.state_dict())
    x, target = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
    sol_model = sol.optimize(model, x, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        for net, opt in ((sol_model, optimizer), (reference, reference_optimizer)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), target).backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=name)
        optimizer.step()
        reference_optimizer.step()
    torch.testing.assert_close(model.bn.running_mean, reference.bn.running_mean, rtol=1e-4, atol=1e-6)


def check_foreign_device_is_refused(device: str) -> None:
    model = SmallNet().eval()
    x = torch.randn(2, 3, 8, 8)
    sol_model = sol.optimize(model, x, device=device)
    with pytest.raises(SolInputError, match=rf"input 0 is on device meta, but the model runs on {device}:0 and takes "
                                            r"cpu tensors"):
        sol_model(torch.empty(2, 3, 8, 8, device="meta"))


def check_profile_reports_copies(device: str) -> None:
    sol.config["compiler::profile"] = True
    try:
        model = SmallNet().eval()
        x = torch.randn(2, 3, 8, 8)
        sol_model = sol.optimize(model, x, device=device)
        with torch.no_grad():
            report = sol.profile(sol_model, x, runs=2, warmup=1)
    finally:
        sol.config["compiler::profile"] = False
    assert report.device == f"{device}:0"
    assert report.transfers is not None
    assert (report.transfers["to_device"], report.transfers["to_host"], report.transfers["launches"]) == (1, 1, 1)
    assert "copies per call: 1 to the device (1536 B), 1 back (40 B)" in str(report)
