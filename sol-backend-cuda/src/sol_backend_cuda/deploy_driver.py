"""The compiler command of `CudaDeployTarget`: a GCC-style command line, carried out by nvcc and g++.

sol-core's deploy driver speaks GCC (``-c src -o obj`` with ``-fPIC
-fvisibility=hidden ...``, then ``-shared obj -o lib -Wl,...``). nvcc takes
host-compiler flags only through ``-Xcompiler`` and a ``.cpp`` source only as
host code, so this driver translates:

* compiling (``-c``): ``nvcc -x cu`` with the gencode flags of ``--sol-cc``,
  every ``-f...`` flag passed to the host compiler with ``-Xcompiler``;
* anything else (linking the shared library, ``-r`` objects): ``g++`` with the
  same arguments plus CUDA's static runtime (``-lcudart_static -ldl -lrt
  -lpthread``, from the toolkit of ``--sol-nvcc``) when it links a shared library.

``--sol-nvcc=PATH`` and ``--sol-cc=80,90`` come from `CudaDeployTarget.option_flags`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

from .flavour import NVCC_FLAGS, gencode_flags, parse_cc
from .toolkit import library_dirs

#: nvcc flags of the CUDA flavour that also apply to a deployed library's translation unit (not -shared/-fPIC:
#: the driver compiles an object; the host flags come from the command line)
_NVCC_OBJECT_FLAGS = tuple(f for f in NVCC_FLAGS if f not in ("--compiler-options", "-fPIC", "-shared"))
#: CUDA's runtime linked statically, and what it needs from the system
CUDART_STATIC = ("-lcudart_static", "-ldl", "-lrt", "-lpthread")


def translate(argv: Sequence[str]) -> list[str]:
    """The nvcc or g++ command that carries out the GCC-style ``argv`` (without the program name)."""
    nvcc, ccs, rest = "", ["90"], []
    for arg in argv:
        if arg.startswith("--sol-nvcc="):
            nvcc = arg.split("=", 1)[1]
        elif arg.startswith("--sol-cc="):
            ccs = parse_cc(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if not nvcc:
        raise SystemExit("sol_backend_cuda.deploy_driver: --sol-nvcc=PATH is missing (CudaDeployTarget passes it)")
    if "-c" in rest:
        host = [a for a in rest if a.startswith("-f")]
        other = [a for a in rest if not a.startswith("-f") and a not in ("-O3",) and not a.startswith("-std=")]
        return [nvcc, "-x", "cu", *_NVCC_OBJECT_FLAGS, *gencode_flags(ccs), "-Xcompiler", ",".join(host), *other]
    cxx = shutil.which("g++") or "g++"
    if "-shared" in rest:
        return [cxx, *rest, *(f"-L{d}" for d in library_dirs(nvcc)), *CUDART_STATIC]
    return [cxx, *rest]


def main(argv: Sequence[str] | None = None) -> int:
    command = translate(list(sys.argv[1:] if argv is None else argv))
    if os.environ.get("SOL_DEPLOY_DRIVER_ECHO"):
        print("$ " + " ".join(command), file=sys.stderr)
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
