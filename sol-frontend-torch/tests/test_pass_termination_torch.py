"""timm CoaT's convolutional relative position encoding, which once made `sol.optimize` loop forever
(`elementwise_before_permute` moved ``q * conv_v.transpose(-1, -2)`` back and forth): its passes finish and match eager; compiled, it matches too (slow set)."""

from __future__ import annotations

import numpy as np
import pytest
import sol
import torch
from sol.ir.interpret import run_reference
from sol.passes import run_inference_passes


class CoatCrpe(torch.nn.Module):
    """CoaT's factorized attention with its conv position encoding, small: ``q * conv(v)^T`` where q and the
    conv's output are read only by that product."""

    def __init__(self, dim: int = 16, heads: int = 2, size: int = 4) -> None:
        super().__init__()
        self.heads, self.size = heads, size
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.conv = torch.nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        factor = k.softmax(dim=2).transpose(-1, -2) @ v
        attended = q @ factor
        conv_v = self.conv(v.transpose(-1, -2).reshape(b, c, self.size, self.size))
        conv_v = conv_v.reshape(b, self.heads, c // self.heads, n).transpose(-1, -2)
        out = attended * 0.25 + q * conv_v
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


def test_coat_crpe_passes_terminate_and_match(frontend) -> None:
    # parse and run the passes (the driver's budget would raise, not hang, if they looped), then check the
    # rewritten graph against eager with the numpy reference: no compiler needed for the part that looped
    torch.manual_seed(0)
    model = CoatCrpe().eval()
    x = torch.randn(1, 16, 16)
    graph = run_inference_passes(frontend.parse(model, (x,)))
    mul = [layer for layer in graph.layers if layer.op == "mul"]
    assert mul, "the pattern is gone from the parsed graph: the test no longer covers it"
    (got,) = run_reference(graph, [x.numpy()])
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_coat_crpe_compiles_and_matches(sol_cache_dir) -> None:
    torch.manual_seed(0)
    model = CoatCrpe().eval()
    x = torch.randn(1, 16, 16)
    with torch.no_grad():
        compiled = sol.optimize(model, x)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
