"""Precompiled system headers (sol.codegen.pch): GCC really uses them, and compiler::pch False leaves them out."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import sol
from sol.codegen.flavours.cpu import CpuFlavour

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (the CI installs it)")


def _source(tmp_path: Path, flavour: CpuFlavour) -> Path:
    source = tmp_path / "model.cpp"
    source.write_text(flavour.prelude() + 'extern "C" double sol_probe(double x) { return sol_x86_exp(x); }\n')
    return source


def test_every_compile_reads_the_precompiled_headers(tmp_path):
    """-H lists the headers a compile reads; a '!' line is a precompiled header GCC found valid and used. Without
    it (other flags than the .gch was built with) GCC would read <cmath> & co. as text again, silently."""
    flavour = CpuFlavour("x86")
    command = flavour.compile_command(_source(tmp_path, flavour), tmp_path / "model.so")
    assert "-include" in command
    done = subprocess.run([*command, "-H", "-Winvalid-pch"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    used = [line for line in done.stderr.splitlines() if line.startswith("! ")]
    assert len(used) == 1 and used[0].endswith("sol_system.h.gch"), done.stderr[:2000]
    assert "invalid" not in done.stderr  # -Winvalid-pch: nothing was rejected


def test_pch_off_compiles_the_same_source_without_it(tmp_path):
    flavour = CpuFlavour("x86")
    sol.config["compiler::pch"] = False
    try:
        command = flavour.compile_command(_source(tmp_path, flavour), tmp_path / "model.so")
    finally:
        sol.config["compiler::pch"] = True
    assert "-include" not in command
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and (tmp_path / "model.so").exists(), done.stderr
