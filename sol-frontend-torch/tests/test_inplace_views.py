"""In-place writes into views: ``a[:, 1:3] = ...``, ``a[:, 0] += 1``, ``b = a.view(...); b[:, 1].zero_()``, writes
through transposes and strided slices, and views taken before a write and read after it (PyTorch's shared memory
makes them see the write). torch.export keeps these as in-place ops on view nodes; the converter writes through
the chain of views to the base (`sol_frontend_torch.aten.views`). Compiled against eager, exactly."""

from __future__ import annotations

import sol.pytorch as sol
import torch


class _Writes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x * 2
        a[:, 0] += 1
        a[:, 1:3] = a[:, 1:3] * 5
        b = a.view(2, 2, 3)
        b[:, 1].zero_()
        c = a.t()
        c[0:2].mul_(3)
        a[0, ::2] = -1.0
        d = x.clone()
        d.transpose(0, 1)[1, :] = 7
        e = x.new_zeros(2, 6)
        e[:, 1:4] = x[:, :3]
        e[..., 5].fill_(2.5)
        return a, d, e


class _StaleViews(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x * 2
        v = a[:, 0:3]
        w = v.t()
        a[:, 1] = 3  # v and w see it
        y = a.relu_()
        a.add_(1)  # so does y
        return v + 1, w * 2, y, a


class _RelativeBias(torch.nn.Module):
    """timm's MViTv2 pattern: attn[:, :, 1:, 1:] = attn[:, :, 1:, 1:] + bias."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        attn = q @ k.transpose(-2, -1)
        attn[:, :, 1:, 1:] = attn[:, :, 1:, 1:] + (q[:, :, 1:, :1] * k[:, :, 1:, :1].transpose(-2, -1))
        return attn.softmax(-1)


def _compare(model: torch.nn.Module, *inputs: torch.Tensor) -> None:
    with torch.no_grad():
        want = model(*inputs)
        got = sol.optimize(model, *inputs)(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_writes_into_views() -> None:
    _compare(_Writes().eval(), torch.randn(2, 6))


def test_views_taken_before_a_write_see_it() -> None:
    _compare(_StaleViews().eval(), torch.randn(2, 6))


def test_relative_position_bias_written_into_a_slice() -> None:
    _compare(_RelativeBias().eval(), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4))
