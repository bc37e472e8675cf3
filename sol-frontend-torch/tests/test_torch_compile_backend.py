"""``torch.compile(model, backend="sol")`` through the torch_dynamo_backends entry point, and its partitioning
around ops SOL does not support."""

import logging

import pytest
import sol
import torch
from sol.errors import SolUnsupportedError
from sol_frontend_torch import dynamo
from sol_frontend_torch.module import SolModule


class SmallNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))


def test_sol_is_a_registered_dynamo_backend():
    assert "sol" in torch._dynamo.list_backends()


def test_torch_compile_with_sol_matches_eager(sol_cache_dir):
    torch.manual_seed(0)
    model = SmallNet().eval()
    x = torch.randn(2, 3, 16, 16)
    compiled = torch.compile(model, backend="sol")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


class SortInTheMiddle(torch.nn.Module):
    """Supported layers, an op SOL has no converter for (sort), supported layers again."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        y = torch.relu(self.fc1(x)) * 2.0
        y = torch.sort(y, dim=1).values
        return torch.sigmoid(self.fc2(y) + 1.0)


def _unsupported_today() -> None:
    from sol_frontend_torch.aten import HANDLERS

    assert "sort" not in HANDLERS, "sort is supported now: pick another op SOL lacks for these tests"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def sol_log():
    records = _Records()
    logger = logging.getLogger("sol.dynamo")
    logger.addHandler(records)
    dynamo._LOGGED.clear()
    yield records.messages
    logger.removeHandler(records)


def _compile(model):
    """torch.compile with the sol backend, keeping what it returned for each graph."""
    compiled_graphs = []

    def backend(gm, example_inputs):
        compiled_graphs.append(dynamo.sol_backend(gm, example_inputs))
        return compiled_graphs[-1]

    torch._dynamo.reset()
    return torch.compile(model, backend=backend), compiled_graphs


def test_sol_optimize_still_refuses_and_names_torch_compile(sol_cache_dir):
    _unsupported_today()
    with pytest.raises(SolUnsupportedError, match=r"sort.*torch\.compile\(model, backend=\"sol\"\)"):
        sol.optimize(SortInTheMiddle().eval(), torch.randn(2, 8))


def test_torch_compile_partitions_around_an_unsupported_op(sol_cache_dir, sol_log):
    _unsupported_today()
    torch.manual_seed(0)
    model = SortInTheMiddle()
    x = torch.randn(3, 8)
    compiled, graphs = _compile(model)
    out = compiled(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    # the parts before and after sort are SOL-compiled submodules; sort runs in eager between them
    (graph,) = graphs
    sol_parts = [m for m in graph.modules() if isinstance(m, SolModule)]
    assert len(sol_parts) == 2
    assert any(n.op == "call_function" and n.target is torch.sort for n in graph.graph.nodes)
    fallback = [m for m in sol_log if "does not support" in m]
    assert len(fallback) == 1 and "sort" in fallback[0]
    compiled(x)  # a second call compiles nothing and logs nothing again
    assert len(graphs) == 1 and len([m for m in sol_log if "does not support" in m]) == 1

    # training through it: eager's gradients
    model.zero_grad()
    compiled(x).square().sum().backward()
    got = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    model(x).square().sum().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(got[name], p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_partitioned_inputs_get_gradients(sol_cache_dir, sol_log):
    # the gradient flows through SOL, eager sort, SOL into an input that requires it
    torch.manual_seed(1)
    model = SortInTheMiddle()
    x = torch.randn(2, 8, requires_grad=True)
    compiled, _ = _compile(model)
    compiled(x).sum().backward()
    got = x.grad.clone()
    x.grad = None
    model(x).sum().backward()
    torch.testing.assert_close(got, x.grad, rtol=1e-4, atol=1e-5)
