"""SOL's logging: standard `logging`, tagged with time since start and component.

Every component logs through ``sol.log.get(component)``; lines look like::

    [SOL +0.412s plugins] WARNING  plugin 've' disabled: ...

The level comes from ``sol.config["log::level"]`` or the ``SOL_LOG``
environment variable (``TRACE``, ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``).
"""

from __future__ import annotations

import logging
import os
import sys
import time

TRACE = 5
logging.addLevelName(TRACE, "TRACE")

LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR")
ROOT = "sol"
_START = time.monotonic()


class _SolFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        component = record.name[len(ROOT) + 1 :] if record.name.startswith(ROOT + ".") else record.name
        elapsed = record.created - _WALL_START
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return f"[SOL +{elapsed:.3f}s {component}] {record.levelname:<7} {message}"


_WALL_START = time.time() - (time.monotonic() - _START)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is *now* (pytest, notebooks and IDEs swap it)."""

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _install_handler() -> logging.Logger:
    root = logging.getLogger(ROOT)
    if not any(getattr(h, "_sol_handler", False) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(_SolFormatter())
        handler._sol_handler = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        root.propagate = False
    return root


def set_level(level: str) -> None:
    """Set SOL's log level by name (one of `LEVELS`)."""
    name = level.upper()
    if name not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    _install_handler().setLevel(logging.getLevelName(name))


def get(component: str) -> logging.Logger:
    """The logger of one SOL component (e.g. "plugins", "compiler", "x86")."""
    _install_handler()
    return logging.getLogger(f"{ROOT}.{component}")


def initial_level() -> str:
    """The level to start with: ``SOL_LOG`` if set and valid, else WARNING."""
    env = os.environ.get("SOL_LOG", "").strip().upper()
    return env if env in LEVELS else "WARNING"


set_level(initial_level())
