"""The compilers that target the VE, and their versions.

NEC's SDK installs nc++ in /opt/nec/ve/bin, which is often not on PATH, so
that directory is searched too unless ``ve::cxx`` names a compiler.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import sol
from sol.records import ConfigKey

CXX_KEY = ConfigKey(
    "ve::cxx",
    str,
    "nc++",
    "The NEC C++ compiler for VE code; the default searches PATH, then /opt/nec/ve/bin.",
)
NEC_SDK_BIN = Path("/opt/nec/ve/bin")
#: seconds ``--version`` may take (the NEC SDK is often on a network file system)
TIMEOUT_S = 10.0


def configured_cxx() -> str:
    # .get: a registry built without this plugin (tests) does not declare the key.
    return str(sol.config.get(CXX_KEY.name, CXX_KEY.default))


def find_cxx(configured: str, sdk_bin: Path = NEC_SDK_BIN) -> str | None:
    """The nc++ executable to use, or None."""
    found = shutil.which(configured)
    if found or configured != CXX_KEY.default:
        return found
    candidate = sdk_bin / "nc++"
    return str(candidate) if os.access(candidate, os.X_OK) else None


def compiler_version(executable: str | None) -> str:
    """The first dotted number ``executable --version`` prints first, or why there is none."""
    return "not installed" if executable is None else _version(executable)


@functools.cache
def _version(executable: str) -> str:
    try:
        done = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return f"error: {executable} did not answer within {TIMEOUT_S:g} s"
    except OSError as exc:
        return f"error: {executable} cannot be run ({exc.strerror or exc})"
    # nc++ prints its banner on stderr in some releases, so read both.
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    match = re.search(r"\d+(?:\.\d+)+", lines[0]) if lines else None
    if match is None:
        return f"unknown ({lines[0].strip()[:80] if lines else 'no output'})"
    return match.group(0)
