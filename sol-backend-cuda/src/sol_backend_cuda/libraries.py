"""Finding cuBLAS(Lt) and cuDNN 9: headers to compile against, libraries to link and load, their versions.

Where from, in order: NVIDIA's wheels in this Python environment
(``pip install "sol-backend-cuda[libs]"``: ``nvidia-cublas`` unpacks into
``nvidia/cu13/{include,lib}``, ``nvidia-cudnn-cu13`` into
``nvidia/cudnn/{include,lib}``; a CUDA build of PyTorch depends on the same
wheels), then the toolkit of nvcc, ``$CUDA_HOME`` and the system's directories.
The wheels hold only versioned sonames (``libcublas.so.13``), so the link
line names them (``-l:libcublas.so.13``).

At run time a library built here finds them through its RUNPATH (the
directories they were found in); a library carried to another machine finds
them because `preload` loaded them first from that machine's wheels, or
because PyTorch already has (a loaded soname satisfies a later library's
DT_NEEDED entry).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from .toolkit import wheel_roots

#: (name, header, sonames in load order: cuBLASLt before cuBLAS, which needs it)
LIBRARIES = {
    "cublas": ("cublas_v2.h", ("libcublasLt.so.13", "libcublas.so.13")),
    "cudnn": ("cudnn.h", ("libcudnn.so.9",)),
}
SYSTEM_DIRS = (Path("/usr/include"), Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/local/cuda/include"),
               Path("/usr/local/cuda/lib64"))


@dataclass(frozen=True)
class Library:
    name: str
    include: Path
    lib: Path
    sonames: tuple[str, ...]

    def link_flags(self) -> list[str]:
        return [f"-L{self.lib}", *(f"-l:{soname}" for soname in self.sonames)]


def _candidate_roots() -> list[Path]:
    roots: list[Path] = []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations is not None:
        roots += [Path(base) / "cudnn" for base in spec.submodule_search_locations]
    roots += wheel_roots()
    roots += [Path(p) for p in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")) if p]
    return roots


def find(name: str, extra_roots: tuple[Path, ...] = ()) -> Library | None:
    """Where ``name`` ("cublas" or "cudnn") has both its header and its libraries, or None."""
    header, sonames = LIBRARIES[name]
    for root in [*extra_roots, *_candidate_roots()]:
        include = root / "include"
        for lib in (root / "lib", root / "lib64"):
            if (include / header).is_file() and all((lib / s).exists() for s in sonames):
                return Library(name, include, lib, sonames)
    include, lib = SYSTEM_DIRS[0], SYSTEM_DIRS[1]
    if (include / header).is_file() and all((lib / s).exists() for s in sonames):
        return Library(name, include, lib, sonames)
    return None


@functools.cache
def found() -> tuple[Library, ...] | None:
    """cuBLAS and cuDNN, or None when either is missing (library calls need both)."""
    libraries = tuple(find(name) for name in LIBRARIES)
    return None if any(lib is None for lib in libraries) else libraries  # type: ignore[return-value]


def missing_reason() -> str:
    names = [name for name in LIBRARIES if find(name) is None]
    return (f"{' and '.join(names)} not found (headers and libraries): pip install \"sol-backend-cuda[libs]\" "
            "(NVIDIA's nvidia-cublas and nvidia-cudnn-cu13 wheels)")


def preload() -> None:
    """Load the libraries (global symbols) before a generated module that links them, where they were found."""
    for library in found() or ():
        for soname in library.sonames:
            try:
                ctypes.CDLL(str(library.lib / soname), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass  # the module's own RUNPATH or an already loaded copy (PyTorch's) may still satisfy it


def versions() -> dict[str, str]:
    """cuBLAS and cuDNN versions (``cublasLtGetVersion``, ``cudnnGetVersion``: no GPU needed), or why not."""
    out: dict[str, str] = {}
    for name, (_header, sonames) in LIBRARIES.items():
        library = find(name)
        if library is None:
            out[name] = "not installed (pip install \"sol-backend-cuda[libs]\")"
            continue
        try:
            handle = ctypes.CDLL(str(library.lib / sonames[0]))
            number = int(getattr(handle, "cublasLtGetVersion" if name == "cublas" else "cudnnGetVersion")())
        except (OSError, AttributeError) as exc:
            out[name] = f"error: {library.lib / sonames[0]} cannot be loaded ({exc})"
            continue
        # cuBLAS: major*10000 + minor*100 + patch; cuDNN 9: major*10000 + minor*100 + patch
        out[name] = f"{number // 10000}.{number // 100 % 100}.{number % 100} ({library.lib})"
    return out
