from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from sol_backend_cuda import toolkit
from sol_backend_cuda.backend import CudaBackend
from sol_backend_cuda.flavour import CudaFlavour
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


@pytest.mark.skipif(find_nvcc("nvcc") is None, reason='nvcc is not installed: pip install "sol-backend-cuda[toolchain]"')
def test_versions_with_the_installed_toolkit():
    versions = CudaBackend().versions()
    assert re.fullmatch(r"\d+\.\d+\.\d+", versions["nvcc"])
    # runtime: libcudart's version, or why there is none; cublas/cudnn: theirs (no GPU needed), or how to install them
    assert set(versions) == {"nvcc", "driver", "runtime", "cublas", "cudnn"}
    from sol_backend_cuda import libraries

    if libraries.found() is not None:
        assert re.match(r"13\.\d+\.\d+ \(", versions["cublas"]) and re.match(r"9\.\d+\.\d+ \(", versions["cudnn"])


# -- the toolkit from NVIDIA's wheels (sol-backend-cuda[toolchain]) ------------------------------------------------
def _without_system_toolkit(monkeypatch, tmp_path):
    """Hide every toolkit but the wheels: nothing on PATH but the system's C++ compiler, no CUDA_HOME/CUDA_PATH,
    and no /usr/local/cuda* (the versioned-toolkit search looks in an empty directory)."""
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    for name in ("gcc", "g++", "cc", "c++", "as", "ld", "ld.bfd"):  # nvcc's host compiler and its assembler/linker
        found = shutil.which(name)
        if found and not (tools / name).exists():
            (tools / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(toolkit, "SYSTEM_TOOLKIT", tmp_path / "no-cuda")
    monkeypatch.setattr(toolkit, "VERSIONED_TOOLKITS", tmp_path / "no-local")


def test_wheel_layout_is_found_after_cuda_home(tmp_path, monkeypatch):
    site = tmp_path / "site"
    nvcc = fake_nvcc(site / "nvidia" / "cu13" / "bin")
    monkeypatch.syspath_prepend(str(site))
    _without_system_toolkit(monkeypatch, tmp_path)
    assert toolkit.wheel_roots()[0] == site / "nvidia" / "cu13"
    assert find_nvcc("nvcc") == str(nvcc)
    # CUDA_HOME still wins: the user's explicit choice
    home = fake_nvcc(tmp_path / "home" / "bin")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))
    assert find_nvcc("nvcc") == str(home)


def test_library_dirs_are_where_static_cudart_is(tmp_path):
    nvcc = fake_nvcc(tmp_path / "cu13" / "bin")
    assert toolkit.library_dirs(str(nvcc)) == []
    (tmp_path / "cu13" / "lib").mkdir()
    (tmp_path / "cu13" / "lib" / "libcudart_static.a").write_bytes(b"!<arch>\n")
    assert toolkit.library_dirs(str(nvcc)) == [tmp_path / "cu13" / "lib"]


WHEEL_NVCC = next((root / "bin" / "nvcc" for root in toolkit.wheel_roots() if (root / "bin" / "nvcc").exists()), None)


@pytest.mark.skipif(WHEEL_NVCC is None, reason='the toolchain wheels are not installed: pip install '
                    '"sol-backend-cuda[toolchain]" (the test command of noxfile.py does)')
def test_the_wheels_alone_build_a_fat_binary(tmp_path, monkeypatch):
    """nvcc, its headers, cicc, static cudart and cuobjdump all from the wheels: no system toolkit is reachable."""
    _without_system_toolkit(monkeypatch, tmp_path)
    nvcc = find_nvcc("nvcc")
    assert nvcc is not None and Path(nvcc).parent.parent == WHEEL_NVCC.parent.parent
    assert re.fullmatch(r"13\.0\.\d+", nvcc_version(nvcc))
    source = tmp_path / "scale.cu"
    source.write_text('#include <cuda_runtime.h>\n#include <cmath>\n'
                      "__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; "
                      "if (i < n) x[i] = expf(x[i]); }\n"
                      'extern "C" int run(float* x, int n, void* s) { scale<<<(n + 255) / 256, 256, 0, '
                      "(cudaStream_t)s>>>(x, n); return (int)cudaGetLastError(); }\n")
    flavour = CudaFlavour(cc="80,90", nvcc=nvcc)
    library = tmp_path / "scale.so"
    done = subprocess.run(flavour.compile_command(source, library), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    cuobjdump = toolkit.find_cuobjdump(nvcc)
    assert cuobjdump is not None and Path(cuobjdump).parent == WHEEL_NVCC.parent
    assert toolkit.cubin_architectures(cuobjdump, library) == ["sm_80", "sm_90"]
