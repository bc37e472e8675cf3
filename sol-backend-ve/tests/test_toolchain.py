from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
import sol
from sol_backend_ve.backend import VeBackend
from sol_backend_ve.toolchain import compiler_version, find_cxx


def fake_compiler(directory: Path, name: str, banner: str, to_stderr: bool = False) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\necho '{banner}'{' >&2' if to_stderr else ''}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_nc_version_from_its_banner(tmp_path):
    ncxx = fake_compiler(tmp_path / "bin", "nc++", "nc++ (NCC) 5.0.2", to_stderr=True)
    assert compiler_version(str(ncxx)) == "5.0.2"


def test_sdk_directory_is_searched(tmp_path, monkeypatch):
    ncxx = fake_compiler(tmp_path / "opt" / "nec" / "ve" / "bin", "nc++", "nc++ (NCC) 3.5.1")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_cxx("nc++", sdk_bin=ncxx.parent) == str(ncxx)
    assert find_cxx("nc++", sdk_bin=tmp_path / "absent") is None
    assert find_cxx("/somewhere/else/nc++", sdk_bin=ncxx.parent) is None  # a configured path is taken as given


def test_missing_compiler():
    assert compiler_version(None) == "not installed"


def test_versions_report_both_compilers(tmp_path, monkeypatch):
    fake_compiler(tmp_path / "bin", "clang-14", "Ubuntu clang version 14.0.0-1ubuntu1.1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{tmp_path / 'empty'}")
    versions = VeBackend().versions()
    assert versions["clang-14"] == "14.0.0"
    if shutil.which("nc++") is None and not Path("/opt/nec/ve/bin/nc++").exists():
        assert versions["nc++"] == "not installed"


@pytest.mark.parametrize("configured", ["/opt/custom/nc++-5.0"])
def test_configured_compiler_names_the_entry(configured, monkeypatch):
    sol.config["ve::cxx"] = configured
    try:
        assert VeBackend().versions()["nc++-5.0"] == "not installed"
    finally:
        del sol.config["ve::cxx"]
