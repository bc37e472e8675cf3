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
from sol.errors import SolBuildError
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


# -- building generated code --------------------------------------------------------------------------------------
#: ``SOL_VE_EMULATE=1``: the "VE" is the emulated one, which runs the same VE source compiled for this host
EMULATE_ENV = "SOL_VE_EMULATE"
#: LLVM's VE target (upstream clang): builds VE objects, not shared libraries (it ships no VE libc or linker setup)
CLANG = "clang-14"
CLANG_TARGET = "--target=ve-unknown-linux-gnu"
NCC_FLAGS = ("-O3", "-fopenmp", "-shared", "-fpic")
CLANG_FLAGS = ("-O3", "-fopenmp")
EMULATOR_CXX = "g++"
EMULATOR_FLAGS = ("-O2", "-fopenmp", "-shared", "-fPIC", "-Wno-unknown-pragmas", "-std=c++17")
INSTALL_HINT = (
    "install NEC's SDK (nc++ in /opt/nec/ve/bin, or set sol.config['ve::cxx'] to it) to build for a real VE, "
    f"or set {EMULATE_ENV}=1 to run on the emulated VE (needs g++)"
)


def emulated() -> bool:
    """Whether the VE SOL builds for is the emulated one (``SOL_VE_EMULATE=1``)."""
    return os.environ.get(EMULATE_ENV, "").strip() == "1"


@functools.cache
def emulator_build_extras() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(include dirs, link flags) the emulated VE's libraries need when generated code calls them (vednn).

    The hook for the emulator: ``sol_backend_ve.emulator.build_extras() -> (include_dirs, link_flags)``,
    when that module defines it; nothing otherwise (generated DFP code needs no library).
    """
    try:
        from . import emulator  # type: ignore[attr-defined]
    except ImportError:
        return (), ()
    extras = getattr(emulator, "build_extras", None)
    if extras is None:
        return (), ()
    include_dirs, link_flags = extras()
    return tuple(str(d) for d in include_dirs), tuple(str(f) for f in link_flags)


def native_command(cxx: str, source: Path, library: Path) -> list[str]:
    """nc++ -> a VE shared object."""
    return [cxx, *NCC_FLAGS, str(source), "-o", str(library)]


def emulator_command(source: Path, library: Path, include_dirs: tuple[str, ...] = (),
                     link_flags: tuple[str, ...] = ()) -> list[str]:
    """g++ -> a host shared object of the same VE source, for the emulated VE."""
    return [EMULATOR_CXX, *EMULATOR_FLAGS, *(f"-I{d}" for d in include_dirs), str(source), "-o", str(library),
            *link_flags]


def find_clang() -> str | None:
    return shutil.which(CLANG)


def clang_command(clang: str, source: Path, obj: Path, extra: tuple[str, ...] = ()) -> list[str]:
    return [clang, CLANG_TARGET, *CLANG_FLAGS, *extra, "-c", str(source), "-o", str(obj)]


def compile_objects(source: Path, out_dir: Path, extra_flags: tuple[str, ...] = ()) -> list[Path]:
    """Compile ``source`` into VE objects in ``out_dir`` with clang-14's VE target (no nc++ needed)."""
    clang = find_clang()
    if clang is None:
        raise SolBuildError(f"building VE objects needs {CLANG} with LLVM's VE target (`apt-get install "
                                f"{CLANG}`), or NEC's nc++")
    out_dir.mkdir(parents=True, exist_ok=True)
    obj = out_dir / (Path(source).stem + ".o")
    command = clang_command(clang, Path(source), obj, extra_flags)
    done = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
    if done.returncode != 0 or not obj.exists():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        raise SolBuildError(f"{CLANG} could not compile {source} for the VE (exit code {done.returncode}):\n"
                                f"$ {' '.join(command)}\n{tail}")
    return [obj]
