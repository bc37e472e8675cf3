"""``import sol.pytorch`` names the package to install when its frontend is missing."""

import importlib
import sys

import pytest


def test_sol_pytorch_without_frontend_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "sol_frontend_torch", None)  # import of it fails
    monkeypatch.delitem(sys.modules, "sol.pytorch", raising=False)
    with pytest.raises(ImportError, match="pip install sol-frontend-torch"):
        importlib.import_module("sol.pytorch")
