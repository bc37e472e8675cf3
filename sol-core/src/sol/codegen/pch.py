"""Precompiled system headers for generated C++ (GCC's ``.gch``).

Parsing ``<cmath>``, ``<omp.h>`` and ``<immintrin.h>`` was most of a small model's compile: 118 of its 139 ms on
the 2-core development machine. They are precompiled once per toolchain (compiler, its version, the flags) into
SOL's cache and handed to every compile with ``-include``. The generated source still includes them itself (their
include guards make that free), so it stays self-contained for ``sol.deploy`` and for a failed build's kept copy.

GCC uses a ``.gch`` only when it was built with the options of the compile that finds it; otherwise it reads the
header as text, silently. So the header is built with exactly the flags of the model compiles it serves.
``compiler::pch`` False, a compiler that is not GCC, or a precompile that fails: no ``-include``, the same build,
only slower (a failure is logged once, never raised).
"""

from __future__ import annotations

import functools
import hashlib
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .. import cache, log

_log = log.get("codegen")

HEADER = "sol_system.h"
#: flags that only steer linking; the header is compiled, not linked
_LINK_ONLY = frozenset({"-shared"})


def include_flags(cc: str, flags: Sequence[str], header_text: str, toolchain: str) -> list[str]:
    """``["-include", <header>]`` with its precompiled form beside it, or ``[]`` where none can serve."""
    from . import _config

    if not _config()["compiler::pch"] or not is_gcc(cc):
        return []
    header = _precompiled(cc, tuple(flags), header_text, toolchain)
    return ["-include", str(header)] if header is not None else []


@functools.lru_cache(maxsize=16)
def is_gcc(cc: str) -> bool:
    """Whether ``cc`` is GCC (its ``.gch`` files are what this module builds; clang's PCHs work differently)."""
    try:
        done = subprocess.run([*shlex.split(cc), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and "Free Software Foundation" in done.stdout and "clang" not in done.stdout


@functools.lru_cache(maxsize=16)
def _precompiled(cc: str, flags: tuple[str, ...], header_text: str, toolchain: str) -> Path | None:
    compile_flags = [f for f in flags if f not in _LINK_ONLY]
    key = hashlib.sha256("\0".join(["pch", cc, toolchain, *compile_flags, header_text]).encode()).hexdigest()

    def build(directory: Path) -> dict[str, str]:
        header = directory / HEADER
        header.write_text(header_text)
        command = [*shlex.split(cc), *compile_flags, "-x", "c++-header", str(header), "-o", f"{header}.gch"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{shlex.join(command)} failed:\n{(done.stdout + done.stderr)[-2000:]}")
        return {"what": "precompiled system headers", "toolchain": toolchain}

    try:
        entry = cache.get_or_build(key, build)
        entry.file(f"{HEADER}.gch")
        return entry.file(HEADER)
    except Exception as exc:  # noqa: BLE001 - a model builds without it, only slower
        _log.warning("precompiling the system headers failed; models build without them: %s", exc)
        return None
