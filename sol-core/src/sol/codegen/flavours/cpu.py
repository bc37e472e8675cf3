"""The generic OpenMP C++ flavour for host CPUs (x86; arm64 reuses it with another name).

Threads: ``#pragma omp parallel for`` over the outermost parallel loops
(collapsed); SIMD: ``#pragma omp simd`` on the innermost unit-stride loop;
math: the C++ standard library (type-generic, so float code stays float).
"""

from __future__ import annotations

import functools
import shlex
import subprocess
from pathlib import Path

from ...errors import SolBuildError
from .. import pch
from ..flavour import Flavour
from ..templates import render


class CpuFlavour(Flavour):
    """``sol_<name>_*`` math over <cmath>, OpenMP threads and SIMD, built by ``compiler::cc``."""

    def __init__(self, name: str = "x86", cc: str | None = None, cflags: str | None = None) -> None:
        self.name = name
        self._cc = cc
        self._cflags = cflags

    # -- toolchain ----------------------------------------------------------
    @property
    def cc(self) -> str:
        from .. import _config

        return self._cc if self._cc is not None else str(_config()["compiler::cc"])

    @property
    def cflags(self) -> list[str]:
        from .. import _config

        flags = self._cflags if self._cflags is not None else str(_config()["compiler::cflags"])
        extra = ["-g", "-O1"] if _config()["compiler::debug"] else []
        # errno is never read by generated code; without it sqrt & co. can be vectorised.
        return shlex.split(flags) + extra + ["-fno-math-errno", "-std=c++17", "-shared", "-fPIC"]

    def compile_command(self, source: Path, library: Path) -> list[str]:
        flags = self.cflags
        system = pch.include_flags(self.cc, flags, render("system_headers_cpu.j2"), _compiler_version(self.cc))
        return [*shlex.split(self.cc), *flags, *system, str(source), "-o", str(library)]

    def toolchain_id(self) -> str:
        return f"{self.name}|{self.cc}|{_compiler_version(self.cc)}|{' '.join(self.cflags)}"

    # -- loop mapping ------------------------------------------------------------
    def parallel_pragma(self, collapse: int, simd: bool) -> str:
        clause = f" collapse({collapse})" if collapse > 1 else ""
        return f"#pragma omp parallel for{' simd' if simd else ''}{clause} schedule(static)"

    def vector_pragma(self, reduction: tuple[str, str] | None) -> str:
        if reduction is None:
            return "#pragma omp simd"
        op, var = reduction
        return f"#pragma omp simd reduction({op}:{var})"

    def prelude(self) -> str:
        return render("prelude_cpu.j2", prefix=f"sol_{self.name}")


@functools.lru_cache(maxsize=8)
def _compiler_version(cc: str) -> str:
    """``g++ -dumpfullversion`` (part of the cache key: a new compiler means new artifacts)."""
    try:
        done = subprocess.run([*shlex.split(cc), "-dumpfullversion"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SolBuildError(f"the C++ compiler {cc!r} (sol.config['compiler::cc']) cannot be run: {exc}. "
                            "Install g++ or point compiler::cc at a working compiler.") from exc
    if done.returncode != 0:
        done = subprocess.run([*shlex.split(cc), "--version"], capture_output=True, text=True, timeout=60, check=False)
    return (done.stdout.strip().splitlines() or ["unknown"])[0]
