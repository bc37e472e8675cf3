"""Frontend behaviour: errors, wildcard batch, parameters, output structure."""

from __future__ import annotations

import numpy as np
import pytest
import sol
import torch
from sol.errors import SolUnsupportedError
from sol.ir import BATCH
from sol.ir.interpret import run_reference
from sol.passes import run_inference_passes
from sol_frontend_torch import TorchFrontend


class _Unsupported(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), _Bessel())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class _Bessel(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


def test_unsupported_op_names_op_and_module(frontend: TorchFrontend) -> None:
    with pytest.raises(SolUnsupportedError) as info:
        frontend.parse(_Unsupported(), (torch.randn(2, 4),))
    message = str(info.value)
    assert "bessel_j0" in message and "body.1" in message and "_Bessel" in message


class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.nn.functional.max_pool2d(y, 2)
        return self.fc(y.flatten(1)), y.mean((2, 3)) * 2.0


def test_wildcard_batch(frontend: TorchFrontend) -> None:
    model = _Small().eval()
    graph = frontend.parse(model, (sol.input([0, 3, 8, 8]),))
    assert graph.inputs[0].shape == (BATCH, 3, 8, 8)
    assert [t.shape[0] for t in graph.outputs] == [BATCH, BATCH]
    run_inference_passes(graph)
    for batch in (1, 3):
        x = torch.randn(batch, 3, 8, 8)
        with torch.no_grad():
            want = model(x)
        got = run_reference(graph, [x.numpy()])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)


def test_params_keep_state_dict_names(frontend: TorchFrontend) -> None:
    model = _Small().eval()
    graph = frontend.parse(model, (torch.randn(1, 3, 8, 8),))
    assert set(graph.params) <= set(model.state_dict())
    assert {"conv.weight", "bn.running_var", "fc.bias"} <= set(graph.params)
    assert graph.params["conv.weight"].requires_grad and not graph.params["bn.running_mean"].requires_grad


def test_transformer_encoder_with_wildcard_batch(frontend: TorchFrontend) -> None:
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    graph = run_inference_passes(frontend.parse(model, (sol.input([0, 6, 32]),)))
    x = torch.randn(3, 6, 32)
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(run_reference(graph, [x.numpy()])[0], want, rtol=1e-4, atol=1e-5)


def test_frontend_is_a_plugin() -> None:
    info = {p.name: p for p in sol.plugins()}
    assert info["pytorch"].status == "ok"


def test_sol_pytorch_alias() -> None:
    import sol.pytorch as solpt

    assert solpt.input is sol.input
