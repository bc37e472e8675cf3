"""Finding nvcc and asking it for its version.

nvcc is often not on PATH (the toolkit lives in /usr/local/cuda/bin), so
unless ``cuda::nvcc`` names one, SOL looks where PyTorch's extension builder
looks too: PATH, then $CUDA_HOME / $CUDA_PATH, then /usr/local/cuda, then the newest
/usr/local/cuda-X.Y.
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

NVCC_KEY = ConfigKey(
    "cuda::nvcc",
    str,
    "nvcc",
    "The CUDA compiler; the default searches PATH, $CUDA_HOME/bin, $CUDA_PATH/bin and /usr/local/cuda/bin.",
)
CC_KEY = ConfigKey(
    "cuda::cc",
    str,
    "",
    "Compute capabilities to build CUDA code for, e.g. \"90\" or \"80,90\" (a fat binary); empty: the first CUDA "
    "device's, else 90 (H100/H200), so artifacts built without a GPU are cache hits on one.",
)
#: seconds ``nvcc --version`` may take (a toolkit on a network file system can be slow)
TIMEOUT_S = 10.0
MISSING = "not installed (CUDA toolkit; put nvcc on PATH, set CUDA_HOME or sol.config['cuda::nvcc'])"


def find_nvcc(configured: str) -> str | None:
    """The nvcc executable to use, or None."""
    if configured != NVCC_KEY.default:
        return shutil.which(configured)
    found = shutil.which("nvcc")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        candidate = Path(root) / "bin" / "nvcc"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return _versioned_toolkit()


def _versioned_toolkit(root: Path = Path("/usr/local")) -> str | None:
    """nvcc of the newest versioned toolkit (/usr/local/cuda-13.0/bin) where no /usr/local/cuda link exists."""
    def version(path: Path) -> list[int]:
        return [int(x) for x in re.findall(r"\d+", path.parent.parent.name)]

    for candidate in sorted(root.glob("cuda-*/bin/nvcc"), key=version, reverse=True):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def configured_nvcc() -> str:
    # .get: a registry built without this plugin (tests) does not declare the key.
    return str(sol.config.get(NVCC_KEY.name, NVCC_KEY.default))


def nvcc_version(nvcc: str | None) -> str:
    """The full toolkit version of the "release" line, e.g. "13.0.88", or why there is none."""
    return MISSING if nvcc is None else _version(nvcc)


@functools.cache
def _version(nvcc: str) -> str:
    try:
        done = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return f"error: {nvcc} did not answer within {TIMEOUT_S:g} s"
    except OSError as exc:
        return f"error: {nvcc} cannot be run ({exc.strerror or exc})"
    # "Cuda compilation tools, release 13.0, V13.0.88": V... has the patch level, "release" only major.minor.
    releases = [line for line in done.stdout.splitlines() if "release" in line]
    if not releases:
        tail = (done.stdout + done.stderr).strip().splitlines() or ["no output"]
        return f"unknown ({tail[-1].strip()[:80]})"
    match = re.search(r"V(\d+(?:\.\d+)+)", releases[-1]) or re.search(r"release (\d+(?:\.\d+)+)", releases[-1])
    return match.group(1) if match else f"unknown ({releases[-1].strip()[:80]})"
