"""Max and average pools of bf16 models as oneDNN's pooling primitive (sol_backend_x86.pooling).

A conv -> relu -> pool -> conv chain, as in ResNet's stem, SqueezeNet (ceil_mode max pools) and Inception's
average-pool branches, against the float64 reference at batch 1 and 3. In bf16 the pool is a oneDNN call
(SOL_DNNL_POOL) except where its divisor would differ from PyTorch's (an average that counts the padding over a
window reaching past it: ceil_mode's extension), which keeps the generated loop; fp32 always keeps it. A pool whose
result only generated code reads (DenseNet's stem pool, read by a BatchNorm) keeps its generated loop too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference
from sol_backend_x86 import pooling, precision
from sol_backend_x86.flavour import onednn_paths

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
import _graph_builders as builders  # noqa: E402

RNG = np.random.default_rng(23)
BOUNDS = {"fp32": 1e-5, "bf16": 2e-2}  # as test_precision

pytestmark = pytest.mark.skipif(onednn_paths() is None, reason="needs oneDNN")


def _attrs(k: int, s: int, p: int, spatial: int = 2, **extra: Any) -> dict[str, Any]:
    return {"kernel": (k,) * spatial, "stride": (s,) * spatial, "padding": (p,) * spatial,
            "dilation": (extra.pop("dilation", 1),) * spatial, **extra}


#: (name, op, attrs, input size, whether oneDNN runs it in bf16)
POOLS = [
    ("stem_max", "max_pool", _attrs(3, 2, 1), 15, True),
    ("ceil_max", "max_pool", _attrs(3, 2, 0, ceil_mode=True), 14, True),  # SqueezeNet: a 7th, partial window
    ("dilated_max", "max_pool", _attrs(3, 1, 2, dilation=2), 9, True),
    ("transition_avg", "avg_pool", _attrs(2, 2, 0), 14, True),
    ("avg_excluding_pad", "avg_pool", _attrs(3, 1, 1, count_include_pad=False), 9, True),
    ("avg_including_pad", "avg_pool", _attrs(3, 2, 1, count_include_pad=True), 15, True),
    ("ceil_avg_excluding_pad", "avg_pool", _attrs(3, 2, 1, ceil_mode=True, count_include_pad=False), 14, True),
    # ceil_mode's extension past the declared padding: PyTorch's divisor leaves it out, oneDNN's would not
    ("ceil_avg_including_pad", "avg_pool", _attrs(3, 2, 1, ceil_mode=True, count_include_pad=True), 14, False),
]


def _graph(name: str, op: str, attrs: dict[str, Any], size: int) -> Graph:
    g = Graph(name)
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(8, Purpose.C), Dim(size, Purpose.P), Dim(size, Purpose.P)])
    h = builders.conv(RNG, g, x, "conv1", 8, 24, k=3)
    (h,) = g.add_layer("relu", [h], name="relu")
    (h,) = g.add_layer(op, [h], attrs, name="pool")
    g.outputs = [builders.conv(RNG, g, h, "conv2", 24, 16, k=1)]
    return g


@pytest.mark.parametrize("computed_in", ["fp32", "bf16"])
@pytest.mark.parametrize("name,op,attrs,size,in_onednn", POOLS, ids=[p[0] for p in POOLS])
def test_pools_match_the_reference_and_run_in_onednn_in_bf16(name: str, op: str, attrs: dict[str, Any], size: int,
                                                            in_onednn: bool, computed_in: str) -> None:
    if computed_in == "bf16" and not precision.native_bf16():
        pytest.skip("the CPU has no native bf16")
    g = _graph(f"pool_{name}_{computed_in}", op, attrs, size)
    pool = next(layer for layer in g.layers if layer.op == op)
    assert pooling.accepts(pool) == in_onednn
    compiled = compile_graph(g, "x86", passes=False, precision=computed_in)
    source = compiled.source_path.read_text()
    assert ("d->op = SOL_DNNL_POOL;" in source) == (in_onednn and computed_in == "bf16")
    params = {n: t.data for n, t in g.params.items()}
    for batch in (1, 3):
        inputs = [builders.f32(RNG, batch, 8, size, size)]
        (got,) = compiled.run_numpy(inputs, params)
        (exact,) = run_reference(g, [i.astype(np.float64) for i in inputs],
                                 {k: np.asarray(v, np.float64) for k, v in params.items()})
        assert got.shape == exact.shape
        error = float(np.abs(got - exact).max() / np.abs(exact).max())
        assert error <= BOUNDS[computed_in], f"batch {batch}: relative error {error:.2e}"


def test_a_3d_max_pool_runs_in_onednn_in_bf16() -> None:
    if not precision.native_bf16():
        pytest.skip("the CPU has no native bf16")
    g = Graph("pool_3d")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(16, Purpose.C), Dim(6, Purpose.P), Dim(6, Purpose.P),
                          Dim(6, Purpose.P)])
    (h,) = g.add_layer("max_pool", [x], _attrs(2, 2, 0, spatial=3), name="pool")
    (h,) = g.add_layer("relu", [h], name="relu")
    w = g.add_param("conv.weight", builders.f32(RNG, 8, 16, 1, 1, 1, scale=0.3))
    conv = {"stride": (1, 1, 1), "dilation": (1, 1, 1), "groups": 1, "padding": ((0, 0),) * 3}
    (h,) = g.add_layer("conv", [h, w], conv, name="conv")
    g.outputs = [h]
    compiled = compile_graph(g, "x86", passes=False, precision="bf16")
    assert "d->op = SOL_DNNL_POOL;" in compiled.source_path.read_text()
    inputs = [builders.f32(RNG, 2, 16, 6, 6, 6)]
    params = {n: t.data for n, t in g.params.items()}
    (got,) = compiled.run_numpy(inputs, params)
    (exact,) = run_reference(g, [inputs[0].astype(np.float64)], {k: np.asarray(v, np.float64) for k, v in params.items()})
    assert float(np.abs(got - exact).max() / np.abs(exact).max()) <= BOUNDS["bf16"]


def test_the_config_key_keeps_the_generated_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    import sol

    if not precision.native_bf16():
        pytest.skip("the CPU has no native bf16")
    monkeypatch.setitem(sol.config, pooling.ONEDNN_POOLS_KEY.name, False)
    g = _graph("pool_key_off", "max_pool", _attrs(3, 2, 1), 15)
    assert not pooling.accepts(next(layer for layer in g.layers if layer.op == "max_pool"))
    compiled = compile_graph(g, "x86", passes=False, precision="bf16")
    assert "SOL_DNNL_POOL" not in compiled.source_path.read_text()


@pytest.mark.parametrize("reader", ["batch_norm", "relu"])
def test_a_pool_only_generated_code_reads_keeps_its_loop(reader: str) -> None:
    """DenseNet's stem: the pool's result goes to a BatchNorm (and a concatenation), generated code only. It stays
    float32 there, which oneDNN's bf16 pooling does not write, so the generated loop (fused with its reader) runs it."""
    if not precision.native_bf16():
        pytest.skip("the CPU has no native bf16")
    g = Graph(f"pool_generated_reader_{reader}")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(8, Purpose.C), Dim(15, Purpose.P), Dim(15, Purpose.P)])
    h = builders.conv(RNG, g, x, "conv1", 8, 24, k=3)
    (h,) = g.add_layer("max_pool", [h], _attrs(3, 2, 1), name="pool")
    if reader == "batch_norm":
        stats = [g.add_param(f"bn.{n}", np.abs(builders.f32(RNG, 24)) + 0.5) for n in ("weight", "bias", "mean", "var")]
        (h,) = g.add_layer("batch_norm", [h, *stats], {"eps": 1e-5}, name="bn")
    else:
        (h,) = g.add_layer("relu", [h], name="relu")
    g.outputs = [h]
    compiled = compile_graph(g, "x86", passes=False, precision="bf16")
    assert "SOL_DNNL_POOL" not in compiled.source_path.read_text()
    params = {n: t.data for n, t in g.params.items()}
    inputs = [builders.f32(RNG, 2, 8, 15, 15)]
    (got,) = compiled.run_numpy(inputs, params)
    (exact,) = run_reference(g, [inputs[0].astype(np.float64)], {k: np.asarray(v, np.float64) for k, v in params.items()})
    assert float(np.abs(got - exact).max() / np.abs(exact).max()) <= BOUNDS["bf16"]
