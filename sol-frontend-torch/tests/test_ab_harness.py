"""The paired-rounds A/B harness (benchmarks/ab.py) runs end to end, writes well-formed JSON and rejects bad keys.

Structure only: performance is measured by benchmarks/, never asserted in a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

AB = Path(__file__).resolve().parents[2] / "benchmarks" / "ab.py"

pytestmark = pytest.mark.skipif(not AB.is_file(), reason="benchmarks/ab.py is not in this checkout")


def run_ab(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")  # the run's SOL cache (conftest.py): the reader and glue built once
    return subprocess.run([sys.executable, str(AB), *args], capture_output=True, text=True, timeout=900, env=env)


def test_a_key_on_and_off_in_paired_rounds(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    proc = run_ab(tmp_path, "--key", "autotuning", "--models", "mlp",
                  "--rounds", "3", "--calls", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "mlp b1: autotuning on" in proc.stdout
    [row] = json.loads(out.read_text())
    assert (row["model"], row["key"], row["rounds"], row["calls"]) == ("mlp", "autotuning", 3, 2)
    assert len(row["seconds"]["on"]) == len(row["seconds"]["off"]) == 3
    assert all(t > 0 for t in row["seconds"]["on"] + row["seconds"]["off"])
    low, high = row["iqr"]
    assert low <= row["speedup"] <= high
    # both compilations compute the model: against each other and against eager PyTorch
    assert row["max_diff_on_off"] < 1e-3
    assert max(row["max_error_vs_eager"].values()) < 1e-3


@pytest.mark.parametrize("args,message", [
    (("--key", "x86::no_such_key"), "is not a boolean sol.config key"),
    (("--key", "autotuning", "--models", "not_a_model"), "unknown model(s) not_a_model"),
    (("--key", "autotuning", "--rounds", "0"), "must be at least 1"),
])
def test_bad_arguments_are_named(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = run_ab(tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
