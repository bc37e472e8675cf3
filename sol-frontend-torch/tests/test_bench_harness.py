"""The benchmark harness (benchmarks/bench.py) runs end to end and writes well-formed JSON.

Structure only: performance is measured by benchmarks/, never asserted in a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench.py"

pytestmark = pytest.mark.skipif(not BENCH.is_file(), reason="benchmarks/bench.py is not in this checkout")


def run_bench(tmp_path: Path, *args: str, shared_cache: bool = True) -> dict:
    """bench.py on the MLP; ``shared_cache``: in the run's SOL cache (conftest.py: SOL's parameter reader and the
    oneDNN glue are built once per test run), else in a private, empty one per configuration, as bench.py does."""
    out = tmp_path / "bench.json"
    cache = ["--sol-cache", os.environ["SOL_CACHE_DIR"]] if shared_cache else []
    proc = subprocess.run([sys.executable, str(BENCH), "--models", "mlp", "--runs", "2", "--warmup", "1",
                           "--threads", "1", "--json", str(out), *cache, *args],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "geometric mean of SOL vs fastest peer" in proc.stdout
    return json.loads(out.read_text())


def test_inference_eager_and_sol(tmp_path):
    # a private cache: bench.py tells a cached load by the entries the second sol.optimize adds, and other xdist
    # workers add entries to the run's cache at any time
    data = run_bench(tmp_path, "--peers", "eager,sol", "--settle-ms", "5", "--ramp-ms", "2", shared_cache=False)
    meta = data["meta"]
    assert meta["threads"] == [1] and meta["mode"] == "inference" and meta["peers"] == ["eager", "sol"]
    assert meta["settle_ms"] == 5 and meta["ramp_ms"] == 2
    assert meta["sol_versions"]["sol"] and meta["versions"]["torch"] and meta["cpu"]
    [row] = data["results"]
    assert (row["model"], row["batch"], row["threads"]) == ("mlp", 1, 1)
    assert set(row["peers"]) == {"eager", "sol"}
    for name, entry in row["peers"].items():
        assert entry["status"] == "ok", (name, entry)
        assert entry["runs"] == 2 and len(entry["times_ms"]) == 2
        assert entry["p10_ms"] <= entry["median_ms"] <= entry["p90_ms"]
        assert entry["match"] is True, (name, entry)
    sol_entry = row["peers"]["sol"]
    assert sol_entry["compile_cold_s"] > 0
    assert "compile_cached_s" in sol_entry, sol_entry.get("compile_cached_error")
    assert sol_entry["cache_hit"] is True, "a second sol.optimize in a fresh process must load from the cache"
    assert row["fastest_peer"] == "eager"
    assert row["sol_speedup_vs_eager"] == pytest.approx(row["sol_vs_fastest_peer"])
    # 2 runs in 2 rounds of one run each: the per-round ratio is the median of those two runs' ratios
    eager_rounds, sol_rounds = row["peers"]["eager"]["round_medians_ms"], sol_entry["round_medians_ms"]
    assert row["rounds"] == 2 and len(eager_rounds) == len(sol_rounds) == 2
    ratios = sorted(e / s for e, s in zip(eager_rounds, sol_rounds, strict=True))
    assert row["sol_vs_fastest_per_round"] == pytest.approx(sum(ratios) / 2)
    low, high = row["sol_vs_fastest_per_round_iqr"]
    assert low <= row["sol_vs_fastest_per_round"] <= high
    assert data["geomean_sol_vs_fastest_peer"] == pytest.approx(row["sol_vs_fastest_peer"])


def test_training_reports_sol_as_not_available_rather_than_crashing(tmp_path):
    data = run_bench(tmp_path, "--peers", "eager,sol", "--mode", "training", "--batch", "2", "--no-sol-cached")
    [row] = data["results"]
    assert row["mode"] == "training" and row["batch"] == 2
    eager, sol_entry = row["peers"]["eager"], row["peers"]["sol"]
    assert eager["status"] == "ok" and eager["runs"] == 2 and eager["match"] is True
    if sol_entry["status"] == "ok":  # SOL can train: then it is measured and checked like any peer
        assert sol_entry["runs"] == 2 and "match" in sol_entry
    else:
        assert sol_entry["status"] == "n/a" and sol_entry["error"]
        assert row["sol_vs_fastest_peer"] is None
