from __future__ import annotations

import re
import shutil
import stat
from pathlib import Path

import pytest
from sol_backend_cuda.backend import CudaBackend
from sol_backend_cuda.toolkit import MISSING, find_nvcc, nvcc_version

NVCC_OUTPUT = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""


def fake_nvcc(directory: Path, output: str = NVCC_OUTPUT) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvcc"
    path.write_text(f"#!/bin/sh\ncat <<'END'\n{output}END\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_version_from_the_release_line(tmp_path):
    assert nvcc_version(str(fake_nvcc(tmp_path / "bin"))) == "13.0.88"


def test_release_without_v_number(tmp_path):
    nvcc = fake_nvcc(tmp_path / "bin", "Cuda compilation tools, release 9.2\n")
    assert nvcc_version(str(nvcc)) == "9.2"


def test_missing_nvcc_says_how_to_fix_it():
    assert nvcc_version(None) == MISSING


def test_cuda_home_is_searched_when_nvcc_is_not_on_path(tmp_path, monkeypatch):
    nvcc = fake_nvcc(tmp_path / "cuda" / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert find_nvcc("nvcc") == str(nvcc)


def test_configured_nvcc_is_used_as_given(tmp_path):
    nvcc = fake_nvcc(tmp_path / "elsewhere")
    assert find_nvcc(str(nvcc)) == str(nvcc)
    assert find_nvcc(str(tmp_path / "nope" / "nvcc")) is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_versions_with_the_installed_toolkit():
    versions = CudaBackend().versions()
    assert re.fullmatch(r"\d+\.\d+\.\d+", versions["nvcc"])
    assert set(versions) == {"nvcc", "driver", "runtime"}  # runtime: libcudart's version, or why there is none
