"""Shared fixtures: the frontend and a numpy-vs-eager comparison."""

from __future__ import annotations

import pytest
from sol_frontend_torch import TorchFrontend


@pytest.fixture
def frontend() -> TorchFrontend:
    return TorchFrontend()
