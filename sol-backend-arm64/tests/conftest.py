from __future__ import annotations

from pathlib import Path

import pytest
from sol_backend_x86 import tools

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def _fresh_tool_cache():
    """Tool answers are cached per process; tests that change PATH or config need fresh ones."""
    tools._run.cache_clear()
    yield
    tools._run.cache_clear()
