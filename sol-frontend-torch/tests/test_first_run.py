"""benchmarks/first_run.py: a fresh cache builds everything inside sol.optimize, nothing while the model runs.

No timing is asserted (benchmarks/ measures); what is asserted is where the compilers ran.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from . import _benchmark_scripts

FIRST_RUN = _benchmark_scripts.BENCHMARKS / "first_run.py"

pytestmark = [pytest.mark.skipif(not FIRST_RUN.is_file(), reason="benchmarks/first_run.py is not in this checkout"),
              pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="watching compilers needs /proc")]


def test_no_compiler_runs_while_a_fresh_install_times_its_model() -> None:
    proc = subprocess.run([sys.executable, str(FIRST_RUN), "--model", "squeezenet1_1", "--window", "0.5",
                           "--pause", "0.5"], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]  # 1: the windows differ by > 10%
    lines = proc.stdout.splitlines()
    optimize = next(line for line in lines if "sol.optimize" in line)
    assert "cc1plus" in optimize  # a new cache compiles: inside sol.optimize, where it is watched too
    windows = [line for line in lines if "median of" in line]
    assert len(windows) == 2 and all(line.endswith("compilers running: none") for line in windows), proc.stdout


def test_the_watch_sees_a_compiler_started_by_this_process(tmp_path: Path) -> None:
    first_run = _benchmark_scripts.load("first_run")
    source = tmp_path / "busy.cpp"
    source.write_text('#include <regex>\nbool match(const char* s) { return std::regex_match(s, std::regex("a+b")); }\n')
    with first_run.CompilerWatch(interval=0.01) as watch:  # <regex> at -O2: a second or more of cc1plus
        subprocess.run(["g++", "-O2", "-c", str(source), "-o", str(tmp_path / "busy.o")], check=True)
    assert "cc1plus" in watch.seen
