"""Building generated source into a shared library with the flavour's toolchain.

A failed build keeps the source and the compiler's output in a directory
outside the cache (the cache only ever holds complete, working entries) and
raises `SolBuildError` naming it.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from .. import log
from ..errors import SolBuildError
from .flavour import Flavour

_log = log.get("codegen")

SOURCE_NAME = "model"


def failed_builds_dir() -> Path:
    return Path(tempfile.gettempdir()) / "sol-failed-builds"


def build(source: str, flavour: Flavour, directory: Path, model: str) -> Path:
    """Write ``source`` into ``directory`` and compile it there; returns the library path."""
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / f"{SOURCE_NAME}{flavour.source_suffix}"
    lib = directory / f"{SOURCE_NAME}{flavour.library_suffix}"
    src.write_text(source)
    command = flavour.compile_command(src, lib)
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=directory)
        output, code = done.stdout + done.stderr, done.returncode
    except OSError as exc:
        output, code = f"cannot run {command[0]!r}: {exc}", -1
    if code != 0 or not lib.exists():
        kept = _keep_failure(source, src.name, command, output, model)
        message = (f"building model {model!r} failed (exit code {code}). Source kept at {kept / src.name}; "
                   f"build log at {kept / 'build.log'}.\n{_tail(output)}")
        _log.error("%s", message)
        raise SolBuildError(message)
    _log.info("built %s in %.2f s", lib, time.monotonic() - started)
    return lib


def _keep_failure(source: str, name: str, command: list[str], output: str, model: str) -> Path:
    root = failed_builds_dir()
    root.mkdir(parents=True, exist_ok=True)
    kept = Path(tempfile.mkdtemp(prefix=f"{model}-", dir=root))
    (kept / name).write_text(source)
    (kept / "build.log").write_text("$ " + shlex.join(command) + "\n" + output)
    return kept


def _tail(text: str, lines: int = 30) -> str:
    rows = text.strip().splitlines()
    return "\n".join(rows[-lines:]) if rows else "(the compiler printed nothing)"
