"""Intel MKL for Linear layers: its packed GEMM is one of the kernels a Linear is timed with (linear.py).

MKL comes from PyPI (the ``mkl`` wheel, a dependency of this package on x86-64 Linux). Model libraries and the
autotuner's library link its ``libmkl_rt`` where it is installed; the glue declares the few functions it calls
as weak symbols (glue/sol_blas.h), so a library built without MKL (a deployed one, or ``x86::mkl`` off) runs
every Linear on oneDNN, as it would if MKL had lost the timing.
"""

from __future__ import annotations

import functools
import importlib.metadata
from pathlib import Path

import sol
from sol.records import ConfigKey

MKL_KEY = ConfigKey("x86::mkl", bool, True,
                    "Time Intel MKL's packed GEMM against oneDNN for Linear layers and run it where it is faster "
                    "(needs the `mkl` wheel; BERT-base's layers ran 1.1x faster on AVX-512).")


@functools.cache
def _installed() -> Path | None:
    """MKL's single dynamic library (libmkl_rt.so.N) from the installed ``mkl`` wheel, or None."""
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.startswith("libmkl_rt.so"):
            path = Path(file.locate()).resolve()
            if path.is_file():
                return path
    return None


def library() -> Path | None:
    """libmkl_rt for this process's compiles: None where MKL is not installed or ``x86::mkl`` is off."""
    return _installed() if sol.config.get(MKL_KEY.name, True) else None


def link_flags(lib: Path | None) -> list[str]:
    """Linker flags for a library whose glue calls MKL (none without ``lib``). The glue refers to MKL by weak
    symbols only, which --as-needed (the default of Debian's and Ubuntu's gcc) does not count as a need: MKL is
    linked with it off."""
    if lib is None:
        return []
    return [f"-L{lib.parent}", "-Wl,--no-as-needed", f"-l:{lib.name}", "-Wl,--as-needed", f"-Wl,-rpath,{lib.parent}"]
