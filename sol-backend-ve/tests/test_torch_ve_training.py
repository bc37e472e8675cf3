"""The original SOL's tutorial, training included, on PyTorch's VE tensors (the emulated VE).

optimize, load_state_dict, ``.to('ve')``, inference under no_grad, then a training loop on VE tensors (forward on
the VE, the loss on the CPU or on the VE, ``loss.backward()``, SGD then Adam on the VE parameters), matched
against the same flow in eager PyTorch on the CPU. SOL's model calls copy nothing between host and VE but the
dropout key: its own transfer statistics and the VE extension's copy counters say so. Tensors on a device the
model was not compiled for, or parameters elsewhere than the inputs, are SOL errors naming both devices.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

import sol  # noqa: E402
import sol_backend_ve.torch_ve as torch_ve  # noqa: E402
from sol.errors import SolInputError  # noqa: E402
from sol_frontend_torch.offload_checks import ModelCallCopies  # noqa: E402

# ops without a VE kernel (the loss, the optimizer while they have none) run on the CPU, warning once
pytestmark = pytest.mark.filterwarnings("ignore:.*has no VE kernel. it runs on the CPU")

#: bytes of the dropout key (seed, step as int64) a training forward sends to the device
RNG_KEY_BYTES = 16


@pytest.fixture(scope="module", autouse=True)
def ve(torch_ve_device):
    """The emulated VE as PyTorch's VE device (conftest.torch_ve_device)."""
    return torch_ve_device


class TutorialNet(torch.nn.Module):
    """The tutorial's small CNN."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


class NormDropoutNet(torch.nn.Module):
    """With BatchNorm (running statistics updated on the VE) and Dropout (SOL's masks, keyed on the device)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.drop = torch.nn.Dropout(0.25)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.avg_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    return torch.randn(8, 3, 8, 8, generator=generator), torch.randint(0, 10, (8,), generator=generator)


def _native_steps(sol_model: torch.nn.Module) -> list:
    return [s for v in sol_model._sol_variants.values() for k, s in v.steps.items() if k[2] is not None]


def tutorial_flow(net: Callable[[], torch.nn.Module], device: str, loss_on: str, foreach: bool | None,
                  use_sol: bool = True, counters: bool = False) -> dict:
    """The tutorial on ``device``: inference outputs, the loss per training step, the trained state (on the CPU)."""
    torch.manual_seed(0)
    trained, model = net(), net()
    x, y = _data()
    if use_sol:
        model = sol.optimize(model, x)  # optimized for the host; compiled for the VE on first use there
    model.load_state_dict(trained.state_dict())
    model.to(device)
    xd, yd = x.to(device), y.to(device)
    model.eval()
    with torch.no_grad():
        inference = model(xd).cpu()
    model.train()
    copies = ModelCallCopies(model, torch_ve.copy_counters) if counters else None
    losses: list[float] = []
    optimizers = [(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=foreach), 20),
                  (torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach), 5)]
    for optimizer, steps in optimizers:
        for _ in range(steps):
            optimizer.zero_grad()
            out = copies.call(model, xd) if copies is not None else model(xd)
            assert out.device == torch.device(device)
            loss = (torch.nn.functional.cross_entropy(out.cpu(), y) if loss_on == "cpu"
                    else torch.nn.functional.cross_entropy(out, yd))
            loss.backward()
            if copies is not None:
                _check_sol_calls_copied_nothing(model, copies, device, first=not losses)
            optimizer.step()
            losses.append(loss.item())
    return {"inference": inference, "losses": losses,
            "state": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "model": model}


def _check_sol_calls_copied_nothing(model: torch.nn.Module, copies: ModelCallCopies, device: str, first: bool) -> None:
    """Parameters and gradients stayed on the VE: no host copy in SOL's calls (the dropout key aside).

    The first training call captures the model (once per mode): torch.export runs it on the example input moved
    to the VE, and the graph records each parameter's value, read to the host once; that call is bounded by it."""
    uses_rng = model._sol_variants[True].uses_rng
    if first:
        state_bytes = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
        assert copies.forward["to_cpu_bytes"] <= state_bytes, (copies.forward, state_bytes)
    else:
        assert copies.forward == {"to_ve_copies": int(uses_rng), "to_ve_bytes": RNG_KEY_BYTES * uses_rng,
                                  "to_cpu_copies": 0, "to_cpu_bytes": 0}, copies.forward
    assert copies.backward == dict.fromkeys(torch_ve.COPY_COUNTERS, 0), copies.backward
    for name, p in model.named_parameters():
        assert p.device == torch.device(device) and p.grad is not None and p.grad.device == p.device, name
    stats = model.transfers()  # SOL's own account: the native steps' models (and the inference model) copied nothing
    assert (stats.to_device, stats.to_host, stats.parameters) == (0, 0, 0) and stats.launches > 0, stats


def _assert_flows_match(got: dict, want: dict) -> None:
    # float32 tolerances of the CPU training tests (test_training.py): the loss curves closely, the weights after
    # 25 momentum and Adam steps (which amplify rounding differences) more loosely
    torch.testing.assert_close(got["inference"], want["inference"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(want["losses"]), rtol=1e-3, atol=1e-5)
    for name, value in want["state"].items():
        torch.testing.assert_close(got["state"][name].double(), value.double(), rtol=1e-2, atol=1e-3,
                                   msg=lambda m, n=name: f"{n}: {m}")


@pytest.fixture(scope="module")
def eager_cpu() -> dict:
    """The tutorial in eager PyTorch on the CPU (foreach does not change its results)."""
    return tutorial_flow(TutorialNet, "cpu", "cpu", None, use_sol=False)


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("loss_on", ["cpu", "ve"])
def test_tutorial_flow_on_the_ve_matches_eager_cpu(ve, eager_cpu: dict, loss_on: str, foreach: bool) -> None:
    """20 SGD and 5 Adam steps on VE tensors, the loss on the CPU or the VE, optimizers with and without foreach."""
    got = tutorial_flow(TutorialNet, "ve:0", loss_on, foreach, counters=True)
    assert got["losses"][-1] < got["losses"][0] * 0.5  # it learns
    _assert_flows_match(got, eager_cpu)
    assert len(_native_steps(got["model"])) == 1  # one step compiled for ve:0, reused by all 25


def test_norm_and_dropout_on_the_ve_match_sol_on_the_cpu(ve) -> None:
    """BatchNorm's running statistics update on the VE and Dropout's masks (SOL's own, so the reference is SOL on
    CPU tensors with the same seed) are those of the host run."""
    sol.set_seed(5)
    want = tutorial_flow(NormDropoutNet, "cpu", "cpu", None)
    sol.set_seed(5)
    got = tutorial_flow(NormDropoutNet, "ve:0", "ve", None, counters=True)
    _assert_flows_match(got, want)
    assert int(got["state"]["bn.num_batches_tracked"]) == 25


def test_gradients_for_inputs_on_the_ve(ve) -> None:
    """Eval mode with autograd on: the eval step runs natively, input and parameter gradients are VE tensors."""
    torch.manual_seed(1)
    model = TutorialNet().eval()
    eager = copy.deepcopy(model)
    x, y = _data()
    sol_model = sol.optimize(model, x).to("ve")
    xv = x.ve().requires_grad_(True)
    torch.nn.functional.cross_entropy(sol_model(xv).cpu(), y).backward()
    xc = x.clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(eager(xc), y).backward()
    assert xv.grad is not None and xv.grad.device == ve
    torch.testing.assert_close(xv.grad.cpu(), xc.grad, rtol=1e-3, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_tensors_on_the_wrong_device_name_both_devices(ve) -> None:
    torch.manual_seed(2)
    x, y = _data()
    sol_model = sol.optimize(TutorialNet(), x)
    sol_model.to("ve")
    for mode in ("eval", "train"):  # a model moved to the VE, called with CPU tensors
        getattr(sol_model, mode)()
        with pytest.raises(SolInputError, match=r"parameter 'conv1.weight' is on ve:0.*cpu"):
            sol_model(x)
    with pytest.raises(SolInputError, match=r"input 1 is on cpu, but input 0 is on ve:0"):
        sol_model(x.ve(), x)
    on_cpu = sol.optimize(TutorialNet(), x)  # parameters on the CPU, inputs on the VE
    for mode in ("eval", "train"):
        getattr(on_cpu, mode)()
        with pytest.raises(SolInputError, match=r"parameter 'conv1.weight' is on cpu, but the input is on ve:0"):
            on_cpu(x.ve())
    with pytest.raises(SolInputError, match=r"input 0 is on device meta, but the model was optimized for cpu"):
        on_cpu(torch.empty(8, 3, 8, 8, device="meta"))


def test_the_offload_benchmark_training_mode(ve) -> None:
    """benchmarks/ve_offload.py --training on the tutorial's CNN: SOL's calls move nothing natively; transparently
    the parameters go up again after every optimizer step and their gradients come back."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "ve_offload.py"
    spec = importlib.util.spec_from_file_location("ve_offload", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    torch.manual_seed(3)
    model = TutorialNet()
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    native, transparent = bench.measure_training("tutorial", 4, 2, model=model, example=torch.randn(1, 3, 8, 8))
    assert (native["way"], transparent["way"]) == ("native", "transparent")
    assert native["sol_bytes"] == 0  # no dropout: not even a key
    # every parameter uploaded again after each step: to the forward's device context, and those the backward reads
    # (conv2's and fc's weights, for the gradients flowing through them) to the backward's too
    backward_reads = sum(p.numel() * p.element_size() for p in (model.conv2.weight, model.fc.weight))
    assert transparent["sol_parameter_bytes"] == parameter_bytes + backward_reads
    assert transparent["other_ext_bytes"] == 0
    assert transparent["sol_to_host_bytes"] >= parameter_bytes + 4 * 10 * 4  # the gradients and the output at least
    assert transparent["sol_to_device_bytes"] >= 4 * 3 * 8 * 8 * 4  # the input at least
    assert "transparent" in bench.training_table([native, transparent])
