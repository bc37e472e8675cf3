"""aten ops SOL translates into compositions of its own ops: interpolation (nearest, nearest-exact, linear,
bilinear, bicubic, trilinear; align_corners both ways; sizes and scale factors), einsum, vector norms, roll, tile,
repeat_interleave, meshgrid, and batch norm with batch statistics in an inference graph (timm's weight
standardisation). Each parsed graph's reference must equal eager (against float64, eager float32's own error as
the yardstick); one build checks the generated code, and one the gradients of the differentiable ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from sol_frontend_torch import TorchFrontend

from .test_aten_indexing import _check

x4 = torch.randn(2, 3, 5, 6)
x3 = torch.randn(2, 3, 7)
x5 = torch.randn(1, 2, 3, 4, 5)
y4 = torch.randn(2, 3, 5, 6)


def _up(**kwargs: Any) -> Callable[..., Any]:
    return lambda m, x: F.interpolate(x, **kwargs)


CASES: dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...], set[str]]] = {
    "nearest_x2": (_up(scale_factor=2, mode="nearest"), (x4,), {"expand"}),
    "nearest_size": (_up(size=(7, 4), mode="nearest"), (x4,), {"gather"}),
    "nearest_scale_1_5": (_up(scale_factor=1.5, mode="nearest"), (x4,), {"gather"}),
    "nearest_exact": (_up(size=(9, 13), mode="nearest-exact"), (x4,), {"gather"}),
    "bilinear_size": (_up(size=(9, 13), mode="bilinear", align_corners=False), (x4,), {"gather", "mul"}),
    "bilinear_aligned": (_up(size=(9, 13), mode="bilinear", align_corners=True), (x4,), {"gather", "mul"}),
    "bilinear_down": (_up(size=(3, 4), mode="bilinear"), (x4,), {"gather"}),
    "bilinear_scale": (_up(scale_factor=(2.0, 1.5), mode="bilinear"), (x4,), {"gather"}),
    "bicubic": (_up(size=(11, 8), mode="bicubic", align_corners=False), (x4,), {"gather", "mul"}),
    "bicubic_aligned_scale": (_up(scale_factor=1.7, mode="bicubic", align_corners=True), (x4,), {"gather"}),
    "linear_1d": (_up(scale_factor=2.5, mode="linear"), (x3,), {"gather"}),
    "trilinear": (_up(size=(5, 6, 7), mode="trilinear", align_corners=False), (x5,), {"gather"}),
    "nearest_3d": (_up(scale_factor=2, mode="nearest"), (x5,), {"expand"}),
    "upsample_module": (lambda m, x: torch.nn.Upsample(scale_factor=2, mode="bilinear")(x), (x4,), {"gather"}),
    "bilinear_antialias_down": (_up(size=(3, 4), mode="bilinear", antialias=True), (x4,), {"gather"}),
    "bicubic_antialias_down": (_up(scale_factor=0.45, mode="bicubic", antialias=True), (x4,), {"gather"}),
    "bicubic_antialias_up": (_up(size=(8, 13), mode="bicubic", antialias=True), (x4,), {"gather"}),
    "bilinear_antialias_aligned": (_up(size=(4, 3), mode="bilinear", antialias=True, align_corners=True), (x4,),
                                   {"gather"}),
    "unfold": (lambda m, x: (F.unfold(x, 3, padding=1), F.unfold(x, (2, 3), dilation=(2, 1), stride=(1, 2)),
                             F.unfold(x[0], 2)), (x4,), {"concat"}),
    "einsum_attention": (lambda m, q, k: torch.einsum("bchw,bcHW->bhwHW", q, k), (x4, y4), {"matmul"}),
    "einsum_bmm": (lambda m, a, b: torch.einsum("bij,bjk->bik", a, b.transpose(1, 2)), (x3, x3), {"matmul"}),
    "einsum_ellipsis": (lambda m, a, b: torch.einsum("...ij,...kj->...ik", a, b), (x4, y4), {"matmul"}),
    "einsum_sum_out": (lambda m, a, b: torch.einsum("bci,bcj->b", a, b), (x3, x3), {"matmul"}),
    "einsum_three": (lambda m, a, b: torch.einsum("bc,cd,bd->b", a[:, :, 0], b[0, :, :3], a[:, :, 1:4].sum(1)),
                     (x3, x3), {"matmul"}),
    "einsum_implicit": (lambda m, a: torch.einsum("ij,jk", a[0], a[1].t()), (x3,), {"matmul"}),
    "einsum_outer_broadcast": (lambda m, a, b: torch.einsum("bi,xj->bij", a[:, 0], b[:1, 1]), (x3, x3), {"matmul"}),
    "einsum_transpose": (lambda m, a: torch.einsum("abc->cab", a), (x3,), {"permute"}),
    "vector_norms": (lambda m, x: (torch.linalg.vector_norm(x, dim=-1), x.norm(dim=1, keepdim=True),
                                   torch.linalg.vector_norm(x, ord=1, dim=(1, 2)),
                                   torch.linalg.vector_norm(x, ord=float("inf")),
                                   torch.linalg.vector_norm(x, ord=-float("inf"), dim=0),
                                   torch.linalg.vector_norm(x, ord=3.0, dim=2), torch.linalg.vector_norm(x, ord=0)),
                     (x4,), {"sqrt", "reduce_sum"}),
    "normalize": (lambda m, x: F.normalize(x, dim=1), (x4,), {"sqrt"}),
    "roll": (lambda m, x: (torch.roll(x, 1, 2), torch.roll(x, (2, -3), (2, 3)), torch.roll(x, 7), torch.roll(x, -8, 1)),
             (x4,), {"concat"}),
    "tile": (lambda m, x: (x.tile(2), x.tile((2, 1, 1, 1, 2))), (x3,), {"expand"}),
    "repeat_interleave": (lambda m, x: (x.repeat_interleave(2, dim=1), x.repeat_interleave(3)), (x3,), {"expand"}),
    "meshgrid": (lambda m, x: torch.meshgrid(x[0, :, 0], x[0, 0, :4], indexing="ij")
                 + torch.meshgrid(x[0, :, 0], x[1, 0, :4], indexing="xy"), (x3,), {"expand"}),
    "aliases": (lambda m, x, y: (torch.multiply(x, y), torch.subtract(x, y), torch.divide(x, y),
                                 torch.true_divide(x, 2.0), torch.floor_divide(x, 0.3), torch.greater(x, y),
                                 torch.greater_equal(x, 0.1), torch.less(x, y), torch.less_equal(x, y),
                                 torch.not_equal(x, y)), (x4, y4), {"mul", "sub", "div", "gt", "ne"}),
    "addcmul_addcdiv_lerp": (lambda m, x, y: (torch.addcmul(x, x, y, value=0.5), torch.addcdiv(y, x, y.abs() + 1),
                                          torch.lerp(x, y, 0.3), torch.lerp(x, y, y.sigmoid())), (x4, y4),
                             {"mul", "div", "sub"}),
    "diff": (lambda m, x: (torch.diff(x), torch.diff(x, n=2, dim=1), torch.diff(x, dim=2, prepend=x[:, :, :1] * 2,
                                                                          append=x[:, :, -2:]), torch.diff(x > 0)),
             (x4,), {"sub", "ne"}),
    "unary_extra": (lambda m, x: (torch.square(x), F.mish(x), torch.trunc(x * 3), torch.fix(x * 3),
                                  torch.log2(x.abs() + 0.1), torch.log10(x.abs() + 0.1)), (x4,), {"softplus", "floor"}),
    "batch_norm_batch_statistics": (
        lambda m, x: F.batch_norm(x.reshape(1, 3, -1), None, None, weight=x[0, :, 0, 0].abs(), training=True,
                                  momentum=0.0, eps=1e-5), (x4,), {"batch_norm_train"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(frontend: TorchFrontend, name: str) -> None:
    fn, inputs, ops = CASES[name]
    _check(frontend, fn, *inputs, ops=ops)


class _Mixed(torch.nn.Module):
    """Every family once, differentiable: what the build and the gradient check run."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(4, track_running_stats=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        up = F.interpolate(self.conv(x), size=(9, 11), mode="bilinear", align_corners=False)
        cubic = F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True)
        near = F.interpolate(self.norm(self.conv(x)), scale_factor=2, mode="nearest")
        attention = torch.einsum("bchw,bcHW->bhwHW", x, y).softmax(-1)
        rolled = torch.roll(F.normalize(x, dim=1), (1, -2), (2, 3)).tile(1, 2, 1, 1).repeat_interleave(2, dim=1)
        return up, cubic, near, attention, rolled


def test_compiled_matches_eager() -> None:
    import sol.pytorch as sol

    model = _Mixed().eval()
    with torch.no_grad():
        want = model(x4, y4)
        got = sol.optimize(model, x4, y4)(x4, y4)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_gradients_match_eager() -> None:
    import sol.pytorch as sol

    torch.manual_seed(0)
    model = _Mixed().train()
    reference = _Mixed().train()
    reference.load_state_dict(model.state_dict())
    optimized = sol.optimize(model, x4, y4)
    optimized.train()
    xs = [x4.clone().requires_grad_(), y4.clone().requires_grad_()]
    xr = [x4.clone().requires_grad_(), y4.clone().requires_grad_()]
    weights = [torch.randn_like(t) for t in reference(*xr)]
    sum((o * w).sum() for o, w in zip(optimized(*xs), weights, strict=True)).backward()
    sum((o * w).sum() for o, w in zip(reference(*xr), weights, strict=True)).backward()
    for a, b in zip(xs, xr, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)


class _Conv1D(torch.nn.Module):
    """GPT-2's Conv1D (addmm with a [in, out] weight) and its tanh-GELU (x ** 3): compiled as a linear layer with
    the weight transposed in prepare, and the cube as products, as PyTorch computes it."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 5) * 0.3)
        self.bias = torch.nn.Parameter(torch.randn(5))
        self.second = torch.nn.Parameter(torch.randn(5, 4) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.addmm(self.bias, x.reshape(-1, 6), self.weight).reshape(*x.shape[:-1], 5)
        h = 0.5 * h * (1.0 + torch.tanh(0.79788456 * (h + 0.044715 * torch.pow(h, 3.0))))
        return (h ** 2) @ self.second


def test_conv1d_as_linear(frontend: TorchFrontend) -> None:
    import sol.pytorch as sol

    model = _Conv1D()
    x = torch.randn(2, 3, 6)
    graph = frontend.parse(model.eval(), (x,))
    ops = [layer.op for layer in graph.layers]
    assert ops.count("linear") == 2 and "matmul" not in ops and "pow" not in ops, ops
    optimized = sol.optimize(model, x)
    optimized.train()
    xs, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.testing.assert_close(optimized(xs), model(xr), rtol=1e-4, atol=1e-5)
    optimized(xs).sum().backward()
    model(xr).sum().backward()
    torch.testing.assert_close(xs.grad, xr.grad, rtol=1e-4, atol=1e-5)
    for p in model.parameters():  # the same parameters, accumulated twice: SOL's then eager's
        assert p.grad is not None
    reference = _Conv1D()
    reference.load_state_dict(model.state_dict())
    reference(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, 2 * q.grad, rtol=1e-4, atol=1e-5, msg=name)
