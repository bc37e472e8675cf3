"""pytest plugin registered by sol-core (entry point ``pytest11``): SOL fixtures.

Kept import-light: it must not load SOL plugins just because pytest started.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def sol_isolated_registry():
    """A factory: ``with sol_isolated_registry([FakeEntryPoint(...)]) as reg`` swaps the process registry."""
    from .plugins import isolated_registry

    return isolated_registry


@pytest.fixture
def sol_cache_dir(tmp_path, monkeypatch) -> Iterator:
    """A private, empty SOL cache for one test."""
    path = tmp_path / "sol-cache"
    monkeypatch.setenv("SOL_CACHE_DIR", str(path))
    yield path
