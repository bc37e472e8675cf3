"""Parsed-model records: skip the frontend's capture when the same model is optimized again.

Capturing a framework model (torch.export) costs seconds, far more than
loading a cached artifact. A frontend that can fingerprint a model cheaply
and conservatively (`Frontend.fingerprint`) lets `sol.optimize` store the
optimized Graph (after passes) *without parameter values* plus the
frontend's own state for ``wrap`` (e.g. the output structure) under a key of
that fingerprint, SOL's own code and the settings that shape the graph. A
later ``sol.optimize`` of a model with the same fingerprint (in any process)
loads that record instead of capturing, and the graph's artifact comes from
the artifact cache as usual.

Records live in the artifact cache (`sol.cache`), so they share its privacy
checks, integrity hashes, locking and `sol cache clear`.
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import json
import os
import pickle
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cache, log
from ._version import __version__
from .ir import Graph

_log = log.get("graph_cache")

RECORD_NAME = "parsed.pickle"
#: Bump when the record's content changes.
RECORD_VERSION = "1"
#: settings that never change a parsed graph (everything else in sol.config is part of the key)
_IRRELEVANT_CONFIG = ("log::", "compiler::progress", "compiler::name", "compiler::debug_dir")
_PARAM_DATA = "param-data"


@dataclass
class ParsedRecord:
    """What `sol.optimize` needs after the capture: the optimized graph and the frontend's wrap state."""

    graph: Graph
    frontend_state: Any


def record_key(fingerprint: str, device: str) -> str:
    """The cache key of a parsed record: the frontend's fingerprint, the device, SOL's code and settings."""
    import sol

    settings = {k: repr(v) for k, v in sol.config.items() if not k.startswith(_IRRELEVANT_CONFIG)}
    parts = {"record": RECORD_VERSION, "sol": __version__, "code": sol_code_identity(),
             "fingerprint": fingerprint, "device": device, "config": settings}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


#: the parts of sol-core that decide a parsed, optimized graph (the IR and op registry, the passes, input
#: specs, this module); codegen is covered by the artifact's own key, the frontend by its fingerprint
_GRAPH_SOURCES = ("ir", "passes", "inputs.py", "graph_cache.py", "_version.py")


@functools.cache
def sol_code_identity() -> str:
    """A stamp of the sol-core sources a parsed graph depends on: an edited pass must not reuse old graphs."""
    root = Path(__file__).parent
    return source_tree_identity(*(root / part for part in _GRAPH_SOURCES))


def source_tree_identity(*roots: Path) -> str:
    """sha256 of (path, size, mtime) of every .py file under ``roots``: cheap (stat only), changes with any edit."""
    h = hashlib.sha256()
    for path in sorted(f for root in roots for f in _python_files(root)):
        st = os.stat(path)
        h.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _python_files(root: Path) -> Iterator[str]:
    if root.is_file():
        yield str(root)
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        yield from (os.path.join(dirpath, f) for f in filenames if f.endswith(".py"))


def load(key: str) -> ParsedRecord | None:
    """The record stored under ``key``, or None (a miss, or an unreadable record: then the caller re-parses)."""
    entry = cache.lookup(key)
    if entry is None:
        return None
    try:
        with open(entry.file(RECORD_NAME), "rb") as f:
            record = _Unpickler(f).load()
    except Exception as exc:  # an old or foreign record: re-parse rather than fail
        _log.debug("parsed record %s unreadable (%s); parsing the model again", key[:12], exc)
        return None
    if not isinstance(record, ParsedRecord):
        return None
    graph = record.graph
    graph._counter = itertools.count(int(graph._counter))  # type: ignore[arg-type]  # see _dump
    return record


def store(key: str, record: ParsedRecord) -> None:
    """Store ``record`` under ``key``; parameter values are left out (they are the framework's, read per call)."""
    with tempfile.TemporaryDirectory(prefix="sol-parsed-") as tmp:
        (Path(tmp) / RECORD_NAME).write_bytes(_dump(record))
        cache.store(key, tmp, {"kind": "parsed", "model": record.graph.name})


def _dump(record: ParsedRecord) -> bytes:
    graph = record.graph
    buffer = io.BytesIO()
    params = {id(t.data) for t in graph.params.values() if t.data is not None}
    counter = graph._counter
    # itertools.count is not picklable on every Python we support: store where it stands instead.
    position = next(counter)
    graph._counter = position  # type: ignore[assignment]
    try:
        _Pickler(buffer, params).dump(record)
    finally:
        graph._counter = itertools.count(position + 1)
    return buffer.getvalue()


class _Pickler(pickle.Pickler):
    """Replaces parameter arrays by a marker: a record holds structure only, never a model's weights."""

    def __init__(self, file: io.BytesIO, params: set[int]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._params = params

    def persistent_id(self, obj: Any) -> str | None:
        return _PARAM_DATA if id(obj) in self._params else None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> None:
        if pid != _PARAM_DATA:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return None
