"""The emulated SX-Aurora VE: NEC's VEDA C API (the subset SOL uses) on the host.

Opt-in with ``SOL_VE_EMULATE=1``; always labelled "emulated". Three artifacts,
compiled with g++ on first use into the cache
(``<SOL_CACHE_DIR or platformdirs.user_cache_dir("sol")>/ve-emulator/<key>``):

- ``libveda.so``: the VEDA C ABI (same symbols and signatures as NEC's
  libveda), so :mod:`sol_backend_ve.veda` runs against it unchanged;
- ``ve-emulator-server``: the device. Started with fork+exec by the library,
  it owns device memory and runs kernels in its own address space; the user's
  process reaches it only through copies over a socket;
- ``libvednn.so``: vednn's convolution/linear functions as plain loops, for
  kernel modules (see :func:`module_flags`).

Kernel modules for the emulator are the VE C++ sources compiled for the host::

    g++ <sources> -o kernel.so $(module_flags())

and exported ``extern "C"`` functions taking pointer/integer arguments and
returning an integer (``uint64_t``) are launchable.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sol.errors import SolBuildError

ENV = "SOL_VE_EMULATE"
MEMORY_ENV = "SOL_VE_EMULATE_MEMORY"
SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("protocol.h", "veda_client.cpp", "server.cpp", "vednn.cpp", "include/vednn.h")
KERNEL_FLAGS = ("-O2", "-fopenmp", "-shared", "-fPIC", "-Wno-unknown-pragmas")


def enabled() -> bool:
    """Whether ``SOL_VE_EMULATE`` asks for the emulated VE."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Build:
    """Where one build of the emulator lies."""

    root: Path
    libveda: Path
    server: Path
    libvednn: Path
    include_dir: Path


def vednn_include_dir() -> Path:
    """The directory of the emulated ``vednn.h`` (no build needed)."""
    return SOURCE_DIR / "include"


def module_flags(build_: Build | None = None) -> list[str]:
    """g++ flags that compile and link a kernel module for the emulator.

    Compile flags, the vednn include dir, and ``-L<dir> -lvednn`` with an
    rpath, so the server's dlopen finds the emulated libvednn.
    """
    b = build_ or build()
    return [*KERNEL_FLAGS, f"-I{b.include_dir}", f"-L{b.root}", "-lvednn", f"-Wl,-rpath,{b.root}"]


def build_extras() -> tuple[list[str], list[str]]:
    """(include dirs, link flags) for generated code that calls the emulated vednn (`toolchain`'s hook)."""
    b = build()
    return [str(b.include_dir)], [f"-L{b.root}", "-lvednn", f"-Wl,-rpath,{b.root}"]


def compile_module(sources: list[str | Path], output: str | Path, extra: list[str] | None = None) -> Path:
    """Compile VE kernel sources into a module the emulator can load."""
    cmd = [_cxx(), *map(str, sources), "-o", str(output), *module_flags(), *(extra or [])]
    _run(cmd, "a kernel module for the emulated VE")
    return Path(output)


def build() -> Build:
    """Compile (once per source/compiler version) and return the emulator's artifacts.

    Concurrent processes are safe: each builds in its own temporary directory
    and renames it into place; the loser of the race uses the winner's.
    """
    return _build(_cache_root())


@cache
def _build(cache_root: Path) -> Build:
    cxx = _cxx()
    key = hashlib.sha256()
    for name in SOURCES:
        key.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes())
    key.update(_compiler_version(cxx).encode())
    final = cache_root / "ve-emulator" / key.hexdigest()[:16]
    if not _complete(final):
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
        try:
            _compile_all(cxx, work)
            try:
                os.rename(work, final)
            except OSError:  # another process finished first
                if not _complete(final):
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return Build(
        final, final / "libveda.so", final / "ve-emulator-server", final / "libvednn.so", SOURCE_DIR / "include"
    )


def _complete(root: Path) -> bool:
    return all((root / name).is_file() for name in ("libveda.so", "ve-emulator-server", "libvednn.so"))


def _compile_all(cxx: str, out: Path) -> None:
    src = SOURCE_DIR
    common = ["-O2", "-Wall", "-g", f"-I{src}", f"-I{src / 'include'}"]
    jobs = {
        "libveda.so": [
            cxx,
            *common,
            "-shared",
            "-fPIC",
            "-pthread",
            str(src / "veda_client.cpp"),
            "-o",
            str(out / "libveda.so"),
            "-ldl",
        ],
        "ve-emulator-server": [
            cxx,
            *common,
            "-fopenmp",
            str(src / "server.cpp"),
            "-o",
            str(out / "ve-emulator-server"),
            "-ldl",
        ],
        "libvednn.so": [
            cxx,
            *common,
            "-fopenmp",
            "-shared",
            "-fPIC",
            str(src / "vednn.cpp"),
            "-o",
            str(out / "libvednn.so"),
        ],
    }
    running = {
        name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, cmd in jobs.items()
    }
    failures = []
    for name, proc in running.items():
        output, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"{name}: {' '.join(jobs[name])}\n{output}")
    if failures:
        raise SolBuildError("building the emulated VE failed:\n" + "\n".join(failures))


def _cxx() -> str:
    cxx = os.environ.get("SOL_VE_EMULATE_CXX", "g++")
    found = shutil.which(cxx)
    if not found:
        raise SolBuildError(
            f"the emulated VE needs a host C++ compiler: {cxx!r} is not on PATH (set SOL_VE_EMULATE_CXX)"
        )
    return found


def _compiler_version(cxx: str) -> str:
    return subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SolBuildError(f"compiling {what} failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


#: where the emulator is built instead of SOL's cache (tests share one build across their private model caches)
DIR_ENV = "SOL_VE_EMULATOR_DIR"


def _cache_root() -> Path:
    override = os.environ.get(DIR_ENV, "").strip()
    if override:
        return Path(override)
    from sol import cache  # SOL_CACHE_DIR, else platformdirs.user_cache_dir("sol")

    return cache.path()
