from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from sol_backend_x86.tools import DOTTED, tool_version


def fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bin_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}:/usr/bin:/bin")
    return d


def test_first_dotted_number_of_the_first_line(bin_dir):
    fake_tool(bin_dir, "fake-g++", 'echo "fake-g++ (Debian 12.2.0-14+deb12u1) 12.2.0"\necho "Copyright 2.0"\n')
    assert tool_version(["fake-g++", "--version"]) == "12.2.0"


def test_line_and_group_selection_like_nvcc(bin_dir):
    fake_tool(
        bin_dir,
        "fake-nvcc",
        'echo "nvcc: NVIDIA (R) Cuda compiler driver"\n'
        'echo "Cuda compilation tools, release 13.0, V13.0.88"\n'
        'echo "Build cuda_13.0.r13.0/compiler.36424714_0"\n',
    )
    assert (
        tool_version(["fake-nvcc", "--version"], line_containing="release", pattern=r"V(" + DOTTED + ")") == "13.0.88"
    )


def test_missing_tool_says_so(bin_dir):
    assert tool_version(["no-such-compiler-sol", "--version"]) == "not installed"
    assert (
        tool_version(["no-such-compiler-sol"], missing="not installed (apt install x)")
        == "not installed (apt install x)"
    )


def test_failing_tool_is_reported_not_raised(bin_dir):
    fake_tool(bin_dir, "broken-cc", 'echo "broken-cc: licence expired" >&2\nexit 3\n')
    assert tool_version(["broken-cc", "--version"]) == "error: broken-cc exited with 3 (broken-cc: licence expired)"


def test_output_without_version(bin_dir):
    fake_tool(bin_dir, "odd-cc", 'echo "odd compiler"\n')
    assert tool_version(["odd-cc", "--version"]) == "unknown (odd compiler)"


def test_tool_runs_once_per_process(bin_dir, tmp_path):
    counter = tmp_path / "calls"
    fake_tool(bin_dir, "counted-cc", f'echo x >> {counter}\necho "counted-cc 1.0"\n')
    assert tool_version(["counted-cc", "--version"]) == "1.0"
    assert tool_version(["counted-cc", "--version"]) == "1.0"
    assert counter.read_text().count("x") == 1


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_real_gxx():
    import re

    assert re.fullmatch(DOTTED, tool_version(["g++", "--version"]))
