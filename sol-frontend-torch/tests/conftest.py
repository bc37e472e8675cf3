"""Shared fixtures: the frontend, and the per-call parameter check in Python or in the compiled native_reader."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sol
from sol_frontend_torch import TorchFrontend, native_reader


@pytest.fixture
def frontend() -> TorchFrontend:
    return TorchFrontend()


@pytest.fixture(params=["python", "native"])
def param_check(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a test with the per-call parameter check in Python, then in the compiled native_reader."""
    previous = sol.config[native_reader.READER_KEY.name]
    if request.param == "native":
        # CI has a C++ compiler and torch's headers: the reader must build, load and agree with Python
        assert native_reader.ensure() is not None
    sol.config[native_reader.READER_KEY.name] = request.param == "native"
    yield request.param
    sol.config[native_reader.READER_KEY.name] = previous


@pytest.fixture(scope="session")
def emulator_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One build of the emulated VE for every test module that uses it, whatever their private model caches."""
    return str(tmp_path_factory.mktemp("ve-emulator"))
