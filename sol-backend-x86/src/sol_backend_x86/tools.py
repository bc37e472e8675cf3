"""Asking command-line tools for their version, quickly and without failing.

``sol.versions()`` calls every backend's ``versions()``; a missing, broken or
hanging compiler must show up there as text, never as an exception, and
asking twice must not run the tool twice (results are cached per process).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import subprocess
from collections.abc import Sequence

#: seconds a ``--version`` call may take (a cold NFS-mounted SDK can be slow)
TIMEOUT_S = 10.0
#: a dotted version number such as 11.4.0 or 13.0
DOTTED = r"\d+(?:\.\d+)+"


def tool_version(
    argv: Sequence[str],
    *,
    missing: str = "not installed",
    pattern: str = DOTTED,
    line_containing: str = "",
) -> str:
    """The version ``argv`` prints, or a short text saying why there is none.

    The version is the first match of ``pattern`` (its group 1 if it has one)
    in the first output line, or in the last line containing
    ``line_containing`` when that is given. ``missing`` is returned when the
    program is not on PATH.
    """
    run = _run(tuple(argv))
    if not run.found:
        return missing
    if run.error:
        return f"error: {run.error}"
    lines = [line for line in run.output.splitlines() if line.strip()]
    if line_containing:
        lines = [line for line in lines if line_containing in line][-1:]
    line = lines[0] if lines else ""
    match = re.search(pattern, line)
    if match is None:
        return f"unknown ({line.strip()[:80] or 'no output'})"
    return match.group(1) if match.groups() else match.group(0)


@dataclasses.dataclass(frozen=True)
class _Run:
    found: bool  # on PATH
    output: str = ""  # stdout and stderr
    error: str = ""  # why it could not be run, or failed


@functools.cache
def _run(argv: tuple[str, ...]) -> _Run:
    executable = shutil.which(argv[0])
    if executable is None:
        return _Run(found=False)
    try:
        done = subprocess.run(
            [executable, *argv[1:]],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _Run(True, error=f"{argv[0]} did not answer within {TIMEOUT_S:g} s")
    except OSError as exc:
        return _Run(True, error=f"{argv[0]} cannot be run ({exc.strerror or exc})")
    if done.returncode != 0 and not done.stdout.strip():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return _Run(True, error=f"{argv[0]} exited with {done.returncode} ({tail[:80]})")
    return _Run(True, output=done.stdout + done.stderr)
