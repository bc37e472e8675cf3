from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from sol_backend_x86.onednn import LIBRARY_KEY, find_library, library_version, onednn_version

CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler to build a stand-in libdnnl")

# A stand-in with oneDNN's ABI for dnnl_version(), so the ctypes layer is
# exercised for real without oneDNN installed.
FAKE_DNNL = r"""
typedef struct { int major, minor, patch; const char *hash; unsigned cpu_runtime, gpu_runtime; } dnnl_version_t;
static const dnnl_version_t v = {3, 5, 3, "66f0cb9eb66affd2da3bf5f8d897376f04aae6af", 2, 0};
const dnnl_version_t *dnnl_version(void) { return &v; }
"""


def build_library(directory: Path, name: str, source: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    c_file = directory / "src.c"
    c_file.write_text(source)
    out = directory / name
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(out), str(c_file)], check=True)
    return out


def test_find_library_prefers_the_soname_link(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libdnnl.so.3.5", "libdnnl.so.3", "libdnnl.so"):
        (lib / name).write_bytes(b"")
    assert find_library([tmp_path / "absent", lib]) == lib / "libdnnl.so"
    assert find_library([tmp_path / "absent"]) is None


def test_not_installed(tmp_path):
    assert onednn_version(search_dirs=[tmp_path]) == "not installed"


@needs_cc
def test_version_read_through_ctypes(tmp_path):
    build_library(tmp_path / "lib", "libdnnl.so.3", FAKE_DNNL)
    assert onednn_version(search_dirs=[tmp_path / "lib"]) == "3.5.3 (git 66f0cb9eb66a)"


@needs_cc
def test_configured_library_wins(tmp_path):
    path = build_library(tmp_path / "custom", "libdnnl.so.3", FAKE_DNNL)
    assert onednn_version(str(path), search_dirs=[tmp_path / "absent"]).startswith("3.5.3")
    missing = onednn_version(str(tmp_path / "nope.so"))
    assert missing == f"not found at {tmp_path / 'nope.so'} (set by {LIBRARY_KEY.name})"


@needs_cc
def test_library_without_dnnl_version(tmp_path):
    path = build_library(tmp_path / "lib", "libdnnl.so.3", "int something_else(void) { return 1; }\n")
    assert "not a oneDNN library" in library_version(path)


def test_unloadable_file(tmp_path):
    path = tmp_path / "libdnnl.so.3"
    path.write_text("not an ELF file")
    assert library_version(path).startswith("unusable (")
