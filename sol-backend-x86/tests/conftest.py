from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sol_backend_x86 import onednn, tools

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def _fresh_tool_caches():
    """Tool answers are cached per process; each test must see its own fake tools."""
    tools._run.cache_clear()
    onednn.library_version.cache_clear()
    yield
    tools._run.cache_clear()
    onednn.library_version.cache_clear()


@pytest.fixture
def private_sol_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One SOL cache for the session's compiling tests, away from the user's (glue and tunings built once)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "sol-cache"))
        yield
