"""Finding nvcc (and cuobjdump beside it) and asking nvcc for its version.

nvcc is often not on PATH (the toolkit lives in /usr/local/cuda/bin), so
unless ``cuda::nvcc`` names one, SOL looks where PyTorch's extension builder
looks too: PATH, then $CUDA_HOME / $CUDA_PATH; then NVIDIA's PyPI wheels in
this Python environment (``pip install "sol-backend-cuda[toolchain]"``: the
``nvidia-cuda-nvcc`` wheel lays the toolkit out as ``site-packages/nvidia/cu13/{bin,include,lib,nvvm}``),
then /usr/local/cuda, then the newest /usr/local/cuda-X.Y.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import sol
from sol.errors import SolBuildError
from sol.records import ConfigKey

NVCC_KEY = ConfigKey(
    "cuda::nvcc",
    str,
    "nvcc",
    "The CUDA compiler; the default searches PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, NVIDIA's wheels in this Python "
    "environment (sol-backend-cuda[toolchain]) and /usr/local/cuda/bin.",
)
CC_KEY = ConfigKey(
    "cuda::cc",
    str,
    "",
    "Compute capabilities to build CUDA code for, e.g. \"90\" or \"80,90\" (a fat binary); empty: the first CUDA "
    "device's, else 90 (H100/H200), so artifacts built without a GPU are cache hits on one. sol.deploy takes the same "
    "as its option 'nvidia::cc'.",
)
DNN_KEY = ConfigKey(
    "cuda::dnn",
    bool,
    True,
    "Run Conv, Linear and MatMul through cuDNN and cuBLAS (headers and libraries from sol-backend-cuda[libs] or the "
    "toolkit); False: SOL's generated kernels for them too.",
)
#: seconds ``nvcc --version`` may take (a toolkit on a network file system can be slow)
TIMEOUT_S = 10.0
#: the system toolkit's usual place, and where versioned ones (cuda-13.0) lie beside it
SYSTEM_TOOLKIT = Path("/usr/local/cuda")
VERSIONED_TOOLKITS = Path("/usr/local")
MISSING = ("not installed (CUDA toolkit; pip install \"sol-backend-cuda[toolchain]\", put nvcc on PATH, set CUDA_HOME "
           "or sol.config['cuda::nvcc'])")


def find_nvcc(configured: str) -> str | None:
    """The nvcc executable to use, or None."""
    if configured != NVCC_KEY.default:
        return shutil.which(configured)
    found = shutil.which("nvcc")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *map(str, wheel_roots()), str(SYSTEM_TOOLKIT)]
    for root in filter(None, roots):
        candidate = Path(root) / "bin" / "nvcc"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return _versioned_toolkit(VERSIONED_TOOLKITS)


def wheel_roots() -> list[Path]:
    """Toolkit roots that NVIDIA's wheels installed into this Python environment, newest CUDA major first.

    Every CUDA 13 wheel (nvcc, crt, nvvm, cudart, cuBLAS, cuobjdump) unpacks into the one namespace directory
    ``nvidia/cu13`` (CUDA 12's used one directory per component), so that directory is a toolkit root:
    ``bin/nvcc``, ``include/``, ``lib/``. Found through the import system, so a virtual environment's
    site-packages (nox, CI) is searched and the machine's is not.
    """
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    found = [Path(base) / name for base in spec.submodule_search_locations
             for name in ("cu14", "cu13") if (Path(base) / name).is_dir()]
    return sorted(found, key=lambda root: root.name, reverse=True)


@functools.cache
def toolkit_root(nvcc: str) -> Path:
    """The toolkit directory of an nvcc (``<root>/bin/nvcc``).

    Asked from nvcc itself (``--dryrun`` prints its ``_HERE_``), so a wrapper script or symbolic link on PATH
    (``/usr/local/bin/nvcc`` running ``/usr/local/cuda-13.0/bin/nvcc``) leads to the real toolkit.
    """
    try:
        done = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull], capture_output=True,
                              text=True, errors="replace", timeout=TIMEOUT_S, check=False)
        here = re.search(r"^#\$ _HERE_=(.+)$", done.stdout + done.stderr, re.MULTILINE)
    except (OSError, subprocess.TimeoutExpired):
        here = None
    return Path(here.group(1).strip()).parent if here else Path(os.path.realpath(nvcc)).parent.parent


def library_dirs(nvcc: str) -> list[Path]:
    """Where nvcc's own libraries (the static cudart nvcc links by default) lie: ``lib64`` in a toolkit, ``lib`` in
    the wheels, whose nvcc.profile names only ``lib64`` (so the wheel-only toolchain needs the ``-L``)."""
    root = toolkit_root(nvcc)
    found: list[Path] = []
    for candidate in (root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"):
        if (candidate / "libcudart_static.a").is_file() and candidate.resolve() not in {d.resolve() for d in found}:
            found.append(candidate)  # lib64 is often a link to targets/x86_64-linux/lib: once is enough
    return found


def find_cuobjdump(nvcc: str | None = None) -> str | None:
    """cuobjdump (lists the cubins of a fat binary): beside nvcc first (same toolkit), then the wheels, then PATH."""
    candidates = [toolkit_root(nvcc) / "bin" / "cuobjdump"] if nvcc else []
    candidates += [root / "bin" / "cuobjdump" for root in wheel_roots()]
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("cuobjdump")


def _versioned_toolkit(root: Path) -> str | None:
    """nvcc of the newest versioned toolkit (/usr/local/cuda-13.0/bin) where no /usr/local/cuda link exists."""
    def version(path: Path) -> list[int]:
        return [int(x) for x in re.findall(r"\d+", path.parent.parent.name)]

    for candidate in sorted(root.glob("cuda-*/bin/nvcc"), key=version, reverse=True):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def configured_cc() -> str:
    """``cuda::cc`` ("" when not set)."""
    return str(sol.config.get(CC_KEY.name, "") or "").strip()


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


def cubin_architectures(cuobjdump: str, binary: Path) -> list[str]:
    """The GPU architectures (``sm_90``...) a library's fat binary holds machine code (cubins) for, sorted.

    ``cuobjdump --list-elf`` names every embedded cubin ``<name>.<n>.sm_90.cubin``; PTX (``--list-ptx``) is not
    machine code and is not counted.
    """
    done = subprocess.run([cuobjdump, "--list-elf", str(binary)], capture_output=True, text=True, errors="replace",
                          timeout=60, check=False)
    if done.returncode != 0:
        raise SolBuildError(f"{cuobjdump} --list-elf {binary} failed: {(done.stdout + done.stderr).strip()[-500:]}")
    found = set(re.findall(r"\.(sm_\d+[af]?)\.cubin", done.stdout))
    return sorted(found, key=lambda arch: (int(re.sub(r"\D", "", arch)), arch))
