"""The VE kernel library of PyTorch's VE device (``ve_kernels.cpp``), built once per VE toolchain into SOL's cache.

The same freestanding source builds with NEC's nc++ for a real VE and with g++ for the emulated VE
(``SOL_VE_EMULATE=1``), which runs VE modules compiled for the host. The C++ extension loads the result as a VEDA
module into each VE's context (``vedaModuleLoad``) and launches its two entry points.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from sol.errors import SolBuildError

from .. import toolchain

HERE = Path(__file__).resolve().parent
SOURCES = (HERE / "ve_kernels.cpp", HERE / "ve_kernels.h")
LIBRARY = "libsol_torch_ve_kernels.so"
#: no C++ runtime on the VE side: the kernels throw nothing and need no unwinding tables
EXTRA_FLAGS = ("-fno-exceptions",)


def _command(source: Path, library: Path) -> tuple[list[str], str]:
    """The compile command for this process's VE (real or emulated) and the compiler's identity (for the key)."""
    if toolchain.emulated():
        cxx = shutil.which(toolchain.EMULATOR_CXX)
        if cxx is None:
            raise SolBuildError(f"the emulated VE's kernels need {toolchain.EMULATOR_CXX} on PATH")
        command = [cxx, *toolchain.EMULATOR_FLAGS, *EXTRA_FLAGS, str(source), "-o", str(library)]
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
        return command, f"emulated {cxx} {version}"
    cxx = toolchain.find_cxx(toolchain.configured_cxx())
    if cxx is None:
        raise SolBuildError(f"PyTorch's VE kernels need NEC's nc++: {toolchain.INSTALL_HINT}")
    return [*toolchain.native_command(cxx, source, library), *EXTRA_FLAGS], f"{cxx} {toolchain.compiler_version(cxx)}"


def key() -> str:
    """The cache key: the sources and the toolchain that builds them."""
    command, identity = _command(Path("ve_kernels.cpp"), Path(LIBRARY))
    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    digest.update("\0".join([*command[1:], identity]).encode())
    return digest.hexdigest()


def library() -> Path:
    """The kernel library for this process's VE: from SOL's cache, compiled there first if missing."""
    import sol
    from sol.debug import progress

    def build(directory: Path) -> dict[str, str]:
        output = directory / LIBRARY
        command, identity = _command(SOURCES[0], output)
        with progress.compiling("PyTorch VE kernels", stages=("torch-ve-kernels",)):
            progress.stage("torch-ve-kernels")
            done = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
        if done.returncode != 0 or not output.exists():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
            raise SolBuildError(f"compiling PyTorch's VE kernels failed (exit code {done.returncode}):\n"
                                f"$ {' '.join(command)}\n{tail}")
        return {"toolchain": identity.splitlines()[0] if identity else ""}

    return sol.cache.get_or_build(key(), build).file(LIBRARY)
