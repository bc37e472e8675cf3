"""The native training path (`sol_frontend_torch.device_tensors`, ``Step(native=True)``) on sol.testing's loopback device.

The loopback is a device with its own memory whose code runs on the host, so CPU tensors can stand in for a
framework's device tensors (PyTorch has no tensors of its own for it): the step is driven the way SolModule
drives it for VE or CUDA tensors. Parameters are handed in by address and re-prepared after an optimizer step,
nothing is copied, and the gradients and BatchNorm statistics are eager PyTorch's. The VE's own run of the
tutorial flow is sol-backend-ve's test_torch_ve_training.
"""

from __future__ import annotations

import copy

import pytest
import sol.pytorch as sol
import torch
from sol.testing.loopback import LoopbackBackend, loopback_device
from sol_frontend_torch.offload_checks import SmallNet
from sol_frontend_torch.training import SolFunction


@pytest.fixture
def device():
    with loopback_device():
        yield "loop:0"


def test_native_step_copies_nothing_and_matches_eager(device: str) -> None:
    torch.manual_seed(4)
    model = SmallNet().train()
    eager = copy.deepcopy(model)
    x, target = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
    sol_model = sol.optimize(model, x)  # for the host; the step below is compiled for the loopback device
    names = [n for n, _ in model.named_parameters()]
    step = sol_model._compiled_step(sol_model._variant(training=True), names, [], device)
    assert step.native and str(step.forward.device) == device and step.backward is not None
    runtime = LoopbackBackend.runtimes[-1]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    for _ in range(3):  # after each optimizer step the parameters' versions changed: prepared again, by address
        for opt in optimizers:
            opt.zero_grad()
        params = dict(model.named_parameters())
        (out,) = SolFunction.apply(step, 4, 1, x, *[params[n] for n in names])
        torch.nn.functional.cross_entropy(out, target).backward()
        torch.nn.functional.cross_entropy(eager(x), target).backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=name)
        for opt in optimizers:
            opt.step()
    torch.testing.assert_close(model.bn.running_var, eager.bn.running_var, rtol=1e-4, atol=1e-6)
    assert int(model.bn.num_batches_tracked) == 3
    stats = sol_model.transfers()
    assert (stats.to_device, stats.to_host, stats.parameters) == (0, 0, 0), stats
    # per step a prepare and a forward, a prepare and a backward: four launches
    assert stats.launches == 12, stats
    assert runtime.transfers == []  # the device's own record: no copy in either direction


def test_native_devices_and_their_glue_are_what_the_backends_declare() -> None:
    """The frontend names no device: the PyTorch device types it runs natively on come from the installed backends'
    ``framework_devices``, and the queue of a native call from the backend's ``framework_glue`` (CUDA's: PyTorch's
    current stream and caching allocator, in sol-backend-cuda). A third-party device with PyTorch tensors of its own
    needs no frontend change."""
    from sol.plugins import registry
    from sol.testing import FakeEntryPoint, isolated_registry
    from sol.testing.plugins import make_module
    from sol_frontend_torch.device_tensors import native_device_types, native_queue

    assert native_device_types() == {"cuda": "cuda", "ve": "ve"}
    cuda = registry().backends["cuda"]
    assert callable(cuda.framework_glue("pytorch").native_queue) and cuda.framework_glue("onnx") is None
    assert registry().backends["ve"].framework_glue("pytorch") is None  # the VE queues its own work
    module = make_module("_sol_test_torch_accel", """
import sol
from sol.records import Backend, Device, ProbeResult
class Glue:
    calls = []
    def native_queue(self, model, device):
        self.calls.append((model, device.type))
        return 1234
class Accelerator(Backend):
    name = "myaccel"
    description = "a device with PyTorch tensors of its own"
    framework_devices = {"pytorch": "privateuseone", "onnx": "ignored here"}
    glue = Glue()
    def framework_glue(self, frontend): return self.glue if frontend == "pytorch" else None
    def probe(self): return ProbeResult(devices=(Device("myaccel", 0, "My accelerator", "myaccel"),))
@sol.hookimpl
def sol_backends(): return [Accelerator()]
""")
    with isolated_registry([FakeEntryPoint("myaccel", module)]):
        assert native_device_types() == {"privateuseone": "myaccel"}
        assert native_queue("model", torch.device("privateuseone", 0)) == 1234
        assert module.Glue.calls == [("model", "privateuseone")]
        assert native_queue("model", torch.device("cpu")) is None  # no backend serves CPU tensors natively
