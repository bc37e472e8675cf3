"""oneDNN matmuls reading q, k, v and writing their result through the head permutes (views.py, sol.codegen.views).

PyTorch's multi-head attention slices q, k and v out of one projection and permutes each to [heads, L, E]; the
product with v goes back to [L, heads, E]. The matmuls read and write those where they lie (oneDNN's acbd/adbc
formats), so the slices and head permutes generate no code. Checked against SOL's reference in fp32 and (on a CPU
with native bf16) in bf16, and that no Cluster is left for the views.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from sol.codegen.views import View
from sol.compiler import compile_graph
from sol.ir import Dim, Graph, Purpose, Tensor
from sol.ir.interpret import run_reference
from sol_backend_x86 import precision, views
from sol_backend_x86.flavour import onednn_paths

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
import _graph_builders as builders  # noqa: E402

RNG = np.random.default_rng(5)


def _view(shape: tuple[int, ...], strides: tuple[int, ...]) -> View:
    return View(Tensor("base", ()), (), shape, strides, 0)


def test_dense_orders_put_unit_dims_outermost() -> None:
    # [1, H, L, E] lying as [L, H, E] (a permuted head split): acbd, the batch dim outermost whatever its stride
    assert views.dense_order((1, 12, 197, 64), (7, 64, 768, 1)) == (0, 2, 1, 3)
    assert views.dense_order((12, 197, 64), (64, 768, 1)) == (1, 0, 2)
    assert views.dense_order((2, 1, 3), (3, 99, 1)) == (0, 1, 2)
    # q as a slice of the packed projection: rows 3 x 768 apart, a gap after each row's 768
    assert views.dense_order((1, 12, 197, 64), (0, 64, 2304, 1)) is None


def test_matmul_reads_and_writes_the_head_major_formats_only() -> None:
    head_major = _view((1, 12, 197, 64), (0, 64, 768, 1))
    assert views.reads(head_major, 4, transposed=False)  # acbd
    assert views.reads(head_major, 4, transposed=True)  # k read transposed: adbc
    assert views.writes(head_major, 4)  # acbd
    odd = _view((2, 12, 197, 64), (64, 128 * 197, 128, 1))  # the batch dim between the rows and the heads
    assert not views.reads(odd, 4, transposed=False) and not views.writes(odd, 4)
    transposed = _view((1, 12, 197, 64), (0, 197 * 64, 1, 197))  # abdc: read, never written
    assert views.reads(transposed, 4, transposed=False) and not views.writes(transposed, 4)


def _multi_head_attention(length: int, heads: int, width: int) -> Graph:
    """x [L, 1, D] -> in-projection -> q, k, v as torch's multi_head_attention_forward makes them -> attention ->
    heads back to [L, 1, D] -> out-projection + residual (nn.MultiheadAttention at batch 1, sequence first)."""
    d = heads * width
    g = Graph("mha_views")
    x = g.add_input("x", [Dim(length, Purpose.S), Dim(1, Purpose.N), Dim(d, Purpose.C)])
    w_in, b_in = g.add_param("in.weight", builders.f32(RNG, 3 * d, d, scale=0.1)), g.add_param("in.bias", builders.f32(RNG, 3 * d))
    (qkv,) = g.add_layer("linear", [x, w_in, b_in], name="in_proj")
    (qkv,) = g.add_layer("reshape", [qkv], {"shape": (length, 1, 3, d)}, name="unflatten")
    (qkv,) = g.add_layer("reshape", [qkv], {"shape": (1, length, 1, 3, d)}, name="unsqueeze")
    (qkv,) = g.add_layer("permute", [qkv], {"perm": (3, 1, 2, 0, 4)}, name="packed")
    (qkv,) = g.add_layer("reshape", [qkv], {"shape": (3, length, 1, d)}, name="squeeze")
    parts = []
    for i, name in enumerate("qkv"):
        (t,) = g.add_layer("slice", [qkv], {"axis": 0, "start": i, "stop": i + 1, "step": 1}, name=name)
        (t,) = g.add_layer("reshape", [t], {"shape": (length, heads, width)}, name=f"{name}.view")
        (t,) = g.add_layer("permute", [t], {"perm": (1, 0, 2)}, name=f"{name}.transpose")
        (t,) = g.add_layer("reshape", [t], {"shape": (1, heads, length, width)}, name=f"{name}.heads")
        parts.append(t)
    (y,) = g.add_layer("attention", parts, {"scale": None, "is_causal": False}, name="attn")
    (y,) = g.add_layer("permute", [y], {"perm": (2, 0, 1, 3)}, name="back")
    (y,) = g.add_layer("reshape", [y], {"shape": (length, d)}, name="flat")
    w_out, b_out = g.add_param("out.weight", builders.f32(RNG, d, d, scale=0.1)), g.add_param("out.bias", builders.f32(RNG, d))
    (y,) = g.add_layer("linear", [y, w_out, b_out], name="out_proj")
    (y,) = g.add_layer("reshape", [y], {"shape": (length, 1, d)}, name="rows")
    (y,) = g.add_layer("add", [y, x], name="residual")
    g.outputs = [y]
    return g


def _relative_error(g: Graph, compiled) -> float:  # type: ignore[no-untyped-def]
    params = {name: t.data for name, t in g.params.items()}
    x = builders.f32(RNG, *[int(s) for s in g.inputs[0].shape])
    (got,) = compiled.run_numpy([x], params)
    (exact,) = run_reference(g, [x.astype(np.float64)], {k: np.asarray(v, np.float64) for k, v in params.items()})
    return float(np.abs(got - exact).max() / np.abs(exact).max())


@pytest.mark.skipif(onednn_paths() is None, reason="oneDNN (onednn-devel-cpu-gomp) is not installed")
@pytest.mark.parametrize("bf16", [False, True])
def test_attention_reads_its_heads_where_they_lie(bf16: bool) -> None:
    if bf16 and not precision.native_bf16():
        pytest.skip("no native bf16 on this CPU")
    g = _multi_head_attention(length=160, heads=4, width=48)
    compiled = compile_graph(g, "x86", precision="bf16" if bf16 else "fp32")
    titles = compiled.metadata["clusters"]
    # the packed permute (three readers) stays; the slices, head permutes and the permute back run in the calls
    assert [t for t in titles if "(permute)" in t and not t.startswith("DNN ")] == ["packed (permute)"]
    assert not [t for t in titles if "(slice)" in t and not t.startswith("DNN ")]
    scores = next(t for t in titles if "attn.scores (matmul)" in t)
    assert scores.startswith("DNN q (slice)") and "k.transpose (permute)" in scores and scores.endswith(
        "attn.scaled (mul)")
    product = next(t for t in titles if "attn (matmul)" in t)
    assert "v (slice)" in product and product.endswith("back (permute)")
    # the out-projection writes [L, 1, D] itself (linear_rows), so the residual add is its post-op
    assert any(t.startswith("DNN out_proj (linear)") and t.endswith("residual (add)") for t in titles)
    error = _relative_error(g, compiled)
    assert error <= (2e-2 if bf16 else 1e-5), error
