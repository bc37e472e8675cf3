from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from sol_backend_cuda import toolkit

CC = shutil.which("cc") or shutil.which("gcc")


@pytest.fixture(scope="session")
def fake_libcuda_dir(tmp_path_factory) -> Path:
    """A directory holding the stand-in libcuda.so.1 built from fake_libcuda.c."""
    if CC is None:
        pytest.skip("no C compiler to build the stand-in libcuda.so.1")
    out = tmp_path_factory.mktemp("fake-cuda")
    source = Path(__file__).parent / "fake_libcuda.c"
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(out / "libcuda.so.1"), str(source)], check=True)
    return out


@pytest.fixture(autouse=True)
def _fresh_nvcc_cache():
    toolkit._version.cache_clear()
    yield
    toolkit._version.cache_clear()
