"""A throw-away third-party backend package: pip-installed, discovered, conformant.

The package is written to a temp dir, installed with pip into a separate
target directory (so the test never changes the test environment) and used
from child processes that put that directory on PYTHONPATH. Without it on
the path — the package uninstalled — its device type is gone again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sol

PYPROJECT = f"""
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "sol-backend-toydev"
version = "2.5.0"
dependencies = ["sol-core>={sol.__version__},<1"]

[project.entry-points."sol.backends"]
toydev = "sol_backend_toydev.plugin"
"""

PLUGIN = '''
"""A toy device that exists only to show what a third-party backend needs."""

import sol
from sol.records import Backend, ConfigKey, Device, ProbeResult


class ToyBackend(Backend):
    name = "toydev"
    description = "Toy accelerator (third-party example)"

    def probe(self) -> ProbeResult:
        return ProbeResult(devices=(
            Device("toydev", 0, "Toy 9000", "toydev", {"cores": 8}),
            Device("toydev", 1, "Toy 9000", "toydev", {"cores": 8}),
        ))

    def versions(self):
        return {"toycc": "9.0"}


@sol.hookimpl
def sol_backends():
    return [ToyBackend()]


@sol.hookimpl
def sol_config_keys():
    return [ConfigKey("toydev::turbo", bool, False, "Run the toy at double clock.")]
'''

CONFORMANCE = """
from sol.testing import BackendConformance


class TestToyConformance(BackendConformance):
    backend_name = "toydev"
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("toy-src")
    (src / "pyproject.toml").write_text(PYPROJECT)
    pkg = src / "src" / "sol_backend_toydev"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "plugin.py").write_text(PLUGIN)
    (src / "tests").mkdir()
    (src / "tests" / "test_conformance.py").write_text(CONFORMANCE)
    target = tmp_path_factory.mktemp("toy-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(src)],
        check=True, capture_output=True, text=True,
    )
    return target


def run(code_or_args: list[str], site: Path | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True, env=env, check=False)


def test_installed_backend_appears_in_devices(installed):
    done = run(["-m", "sol", "devices"], installed)
    assert done.returncode == 0, done.stderr
    assert "toydev: Toy accelerator (third-party example) (2 device(s))" in done.stdout
    assert "[toydev:1] Toy 9000, 8 cores" in done.stdout
    plugins = json.loads(run(["-m", "sol", "plugins", "--json"], installed).stdout)
    toy = next(p for p in plugins if p["name"] == "toydev")
    assert (toy["distribution"], toy["version"], toy["status"]) == ("sol-backend-toydev", "2.5.0", "ok")
    assert "toydev:toycc" in run(["-m", "sol", "versions"], installed).stdout


def test_installed_backend_passes_conformance(installed):
    tests = installed.parent / "toy-tests"
    tests.mkdir(exist_ok=True)
    (tests / "test_toy_conformance.py").write_text(textwrap.dedent(CONFORMANCE))
    done = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)], installed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed" in done.stdout and "failed" not in done.stdout


def test_uninstalled_backend_is_gone():
    done = run(["-m", "sol", "devices"], None)
    assert done.returncode == 0
    assert "toydev" not in done.stdout
    assert not hasattr(sol.device, "toydev")
