from __future__ import annotations

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

