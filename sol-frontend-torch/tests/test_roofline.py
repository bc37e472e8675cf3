"""The roofline tool (benchmarks/roofline.py): FLOPs and weights per module, the bound, and the script end to end.

Structure and arithmetic only: the machine's peak and bandwidth are measured by the script, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from . import _benchmark_scripts

ROOFLINE = Path(__file__).resolve().parents[2] / "benchmarks" / "roofline.py"

pytestmark = pytest.mark.skipif(not ROOFLINE.is_file(), reason="benchmarks/roofline.py is not in this checkout")


@pytest.fixture(scope="module")
def roofline():
    return _benchmark_scripts.load("roofline")


def test_flops_and_weights_per_module(roofline):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, stride=2),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 3 * 3, 10))
    parts = {name: (flops, weights, winograd) for name, flops, weights, winograd
             in roofline.model_work(model.eval(), torch.randn(1, 3, 8, 8))}
    assert parts == {
        "0": (2 * 8 * 8 * 8 * 3 * 9, 4 * (8 * 3 * 9 + 8), True),  # 3x3 stride 1: Winograd's shape
        "1": (2 * 3 * 3 * 8 * 8 * 9, 4 * (8 * 8 * 9 + 8), False),  # stride 2
        "3": (2 * 72 * 10, 4 * (72 * 10 + 10), False),
    }


def test_attention_is_counted_once_with_the_weights_of_its_projections(roofline):
    d, heads, tokens, ff = 32, 4, 10, 64
    layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
    parts = {name: (flops, weights) for name, flops, weights, _ in
             roofline.model_work(layer.eval(), torch.randn(1, tokens, d))}
    projections = 2 * tokens * d * 3 * d + 2 * tokens * d * d  # q, k, v in one product, then out_proj
    products = 2 * 2 * tokens * tokens * d  # q k^T and the weighted sum of v, over all heads
    # out_proj is never called as a module (MultiheadAttention reads its weight): its weights go to self_attn
    assert parts["self_attn"] == (projections + products, 4 * (3 * d * d + 3 * d + d * d + d))
    assert parts["linear1"][0] == parts["linear2"][0] == 2 * tokens * d * ff
    assert sum(f for f, _ in parts.values()) == projections + products + 2 * 2 * tokens * d * ff
    assert sum(w for _, w in parts.values()) == 4 * sum(p.numel() for p in layer.parameters())
    assert torch.backends.mha.get_fastpath_enabled()  # restored after counting


def test_a_model_without_products_keeps_its_weights(roofline):
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(6), torch.nn.ReLU())
    assert roofline.model_work(model.eval(), torch.randn(2, 6)) == [("Sequential", 0.0, 4 * 12, False)]


def test_bound_is_per_module_and_weights_in_the_cache_cost_nothing(roofline):
    parts = [("conv", 1e9, 1e6, True), ("linear", 1e6, 1e9, False)]
    limits = {"flops_per_s": 1e11, "bytes_per_s": 1e10, "last_level_cache_bytes": 32 << 20}
    bound = roofline.bounds(parts, limits)
    # the convolution waits for the cores (10 ms), the Linear for its weights (100 ms)
    assert bound["bound_s"] == pytest.approx(1e9 / 1e11 + 1e9 / 1e10)
    assert bound["compute_s"] == pytest.approx(1.001e9 / 1e11)
    assert bound["memory_s"] == pytest.approx(1.001e9 / 1e10)
    assert bound["winograd_share"] == pytest.approx(1e9 / 1.001e9)
    cached = roofline.bounds(parts, {**limits, "last_level_cache_bytes": 2 << 30})
    assert cached["memory_s"] == 0 and cached["bound_s"] == pytest.approx(cached["compute_s"])


def test_script_with_bench_results(tmp_path):
    results = tmp_path / "bench.json"
    results.write_text(json.dumps({"meta": {"threads": [1]}, "results": [{
        "model": "squeezenet1_1", "batch": 1, "mode": "inference", "onnx": None,
        "peers": {"ort": {"status": "ok", "median_ms": 3.0}, "openvino": {"status": "ok", "median_ms": 2.5},
                  "sol": {"status": "ok", "median_ms": 2.0}}}]}))
    out = tmp_path / "roofline.json"
    proc = subprocess.run([sys.executable, str(ROOFLINE), "--results", str(results), "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["threads"] == 1
    assert data["limits"]["flops_per_s"] > 0 and data["limits"]["bytes_per_s"] > 0
    [row] = data["rows"]
    assert (row["model"], row["sol_ms"], row["fastest_peer"], row["fastest_peer_ms"]) == \
        ("squeezenet1_1", 2.0, "openvino", 2.5)
    assert row["flops"] > 0 and row["bound_s"] > 0
    assert "| squeezenet1_1 |" in proc.stdout and "2.50 (openvino)" in proc.stdout


def test_unknown_model_is_named(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOFLINE), "--models", "not_a_model"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown model(s) not_a_model" in proc.stderr
