"""aten converters of indexing, cumulative, bitwise/logical and creation ops: the parsed graph's reference equals
eager PyTorch (no build: these check the translation; codegen is checked per op in sol-core)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from sol.ir.interpret import run_reference
from sol.passes import run_inference_passes
from sol_frontend_torch import TorchFrontend


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn
        self.register_buffer("table", torch.arange(24.0).reshape(4, 6))

    def forward(self, *args: Any) -> Any:
        return self.fn(self, *args)


def _check(frontend: TorchFrontend, fn: Callable[..., Any], *inputs: torch.Tensor, ops: set[str] | None = None) -> None:
    model = _Fn(fn).eval()
    graph = frontend.parse(model, inputs)
    used = {layer.op for layer in graph.layers}
    if ops is not None:
        assert ops <= used, used
    graph = run_inference_passes(graph)
    with torch.no_grad():
        want = model(*inputs)
        exact = model(*[x.double() if x.is_floating_point() else x for x in inputs])
    want = want if isinstance(want, (tuple, list)) else [want]
    exact = exact if isinstance(exact, (tuple, list)) else [exact]
    got = run_reference(graph, [x.numpy() for x in inputs])
    for g, w, e in zip(got, want, exact, strict=True):
        assert g.dtype == w.numpy().dtype
        if not w.is_floating_point():
            np.testing.assert_array_equal(g, w.numpy())
            continue
        # float32 libm differs from torch's by ulps, which tanh -> atanh amplifies: eager's own error against
        # float64 is the yardstick
        e = e.numpy()
        assert np.all(np.abs(g - e) <= 2 * np.abs(w.numpy() - e) + 1e-6 * np.abs(e) + 1e-6), (g, w.numpy())


x3 = torch.randn(2, 5, 4)
ids = torch.tensor([[3, 0, 2], [1, 1, 4]])

CASES: dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...], set[str]]] = {
    "gather": (lambda m, x, i: torch.gather(x, 1, i[:, :2, None].expand(2, 2, 3)), (x3, ids), {"gather_elements"}),
    "gather_buffer": (lambda m, i: torch.gather(m.table.expand(2, 4, 6), 2, i[:, None, :].expand(2, 3, 3)), (ids,),
                      {"gather_elements"}),
    "index_select": (lambda m, x, i: torch.index_select(x, 2, i[0]), (x3, ids), {"gather"}),
    "take_along_dim": (lambda m, x, i: torch.take_along_dim(x, i[:, :, None], 1), (x3, ids), {"gather_elements"}),
    "index_one": (lambda m, x, i: x[:, i], (x3, ids), {"gather"}),
    "index_two_adjacent": (lambda m, x, i: x[:, i, i[:, :1] % 4], (x3, ids), {"gather_nd"}),
    "index_two_apart": (lambda m, x, i: x[i[0, :2, None] % 2, :, i[1, None, :] % 4], (x3, ids), {"gather_nd"}),
    "index_broadcast_mask": (lambda m, i: m.table[torch.arange(2)[:, None, None], i[0][None, :, None] % 4],
                             (ids,), {"gather_nd"}),
    "cumsum": (lambda m, x: torch.cumsum(x, -1), (x3,), {"cumsum"}),
    "cumsum_int_mask": (lambda m, i: torch.cumsum(i.ne(1).int(), dim=1) * i, (ids,), {"cumsum"}),
    "cumprod": (lambda m, x: torch.cumprod(x, 0), (x3,), {"cumprod"}),
    "bool_ops": (lambda m, x: ((x > 0) & (x < 1)) | ~(x > -0.5) ^ (x > 2), (x3,), {"bitwise_and", "bitwise_or"}),
    "logical_ops": (lambda m, x: torch.logical_or(torch.logical_and(x > 0, x < 1), torch.logical_not(x > -0.5)),
                    (x3,), {"logical_or", "logical_and", "logical_not"}),
    "int_bitwise": (lambda m, i: (i & 2) | (~i ^ 5), (ids,), {"bitwise_and", "bitwise_not", "bitwise_xor"}),
    "max_dim": (lambda m, x: torch.max(x, 1), (x3,), {"reduce_max", "argmax"}),
    "min_dim_keep": (lambda m, x: torch.min(x, -1, keepdim=True), (x3,), {"reduce_min", "argmin"}),
    "max_min_all": (lambda m, x: (x.max(), x.min(), torch.max(x, x * 2)), (x3,), {"reduce_max", "reduce_min"}),
    "argmax": (lambda m, x: (x.argmax(), x.argmin(1, keepdim=True), x.amin((0, 2))), (x3,), {"argmax", "argmin"}),
    "masked_fill": (lambda m, x, i: x.masked_fill(i[:, None, :1] > 1, -1e4).masked_fill(x < -1, 0.5), (x3, ids),
                    {"where"}),
    "stack": (lambda m, x: torch.stack([x, x * 2, -x], 1), (x3,), {"concat"}),
    "repeat": (lambda m, x: (x.repeat(2, 1, 3), x[0].repeat(3, 1, 2)), (x3,), {"expand"}),
    "triu_tril": (lambda m, x: (torch.triu(x, 1), torch.tril(x > 0, -1), torch.tril(m.table.long())), (x3,), {"where"}),
    "prod": (lambda m, x: x.prod(1), (x3,), {"reduce_prod"}),
    "rotary_math": (lambda m, x: (x.cos() * x.sin() + x.floor() - x.ceil() + x.sign(), x.tanh().atanh()), (x3,),
                    {"cos", "sin", "floor", "ceil", "sign", "atanh"}),
    "new_ones": (lambda m, i: i.new_ones(()) & (i > 1) | i.new_zeros((2, 3), dtype=torch.bool), (ids,), set()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(frontend: TorchFrontend, name: str) -> None:
    fn, inputs, ops = CASES[name]
    _check(frontend, fn, *inputs, ops=ops)


class _Everything(torch.nn.Module):
    def forward(self, x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v, k = torch.max(x, 1)
        y = torch.stack([x, -x], 1).repeat(1, 1, 2, 1)
        t = torch.triu(x, 1).masked_fill(i[:, None, :1] > 1, -1e4)
        g = torch.gather(x, 1, i[:, :2, None].expand(2, 2, 3))
        return v, k, y, t, torch.cumsum(i.ne(1).int(), 1) * i, g, x[:, i, i[:, :1] % 4], (i > 1) & ~(i > 3)


def test_compiled_matches_eager() -> None:
    """One build of them all: the generated code of what these translate to."""
    import sol.pytorch as sol

    model = _Everything().eval()
    with torch.no_grad():
        want = model(x3, ids)
        got = sol.optimize(model, x3, ids)(x3, ids)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
