"""Isolated plugin registries built from hand-made entry points."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ..plugins import PluginRegistry, set_registry


@dataclass
class _FakeDistribution:
    name: str
    version: str
    requires: list[str] = field(default_factory=list)

    @property
    def metadata(self) -> dict[str, str]:
        return {"Name": self.name}


@dataclass
class FakeEntryPoint:
    """An entry point that loads a module object (or import path) directly.

    ``distribution``/``version``/``requires`` stand in for the metadata of the
    installed distribution the loader would otherwise read.
    """

    name: str
    target: ModuleType | str
    group: str = "sol.backends"
    distribution: str = "fake-plugin"
    version: str = "0.0.1"
    requires: list[str] = field(default_factory=list)

    @property
    def value(self) -> str:
        return self.target if isinstance(self.target, str) else self.target.__name__

    @property
    def dist(self) -> _FakeDistribution:
        return _FakeDistribution(self.distribution, self.version, self.requires)

    def load(self) -> Any:
        if isinstance(self.target, str):
            module_name, _, attr = self.target.partition(":")
            obj: Any = importlib.import_module(module_name)
            return getattr(obj, attr) if attr else obj
        return self.target


def make_module(name: str, source: str) -> ModuleType:
    """A module object from source text (registered in sys.modules so probes can import it)."""
    module = ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


@contextlib.contextmanager
def isolated_registry(entry_points: Iterable[Any]) -> Iterator[PluginRegistry]:
    """Make a registry of just these entry points the process-wide one, then restore."""
    registry = PluginRegistry(entry_points)
    old = set_registry(registry)
    try:
        yield registry
    finally:
        set_registry(old)
