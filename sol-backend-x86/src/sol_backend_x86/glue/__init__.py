"""The oneDNN glue (sol_dnnl.h/.cpp): built once per toolchain into the SOL cache, linked into models.

Generated models call a small C API instead of including dnnl.hpp, so a
model compiles in the time of its own code; the glue object (a few seconds
of C++) is compiled once per (glue source, compiler, oneDNN) and cached
like any artifact.
"""

from __future__ import annotations

import functools
import hashlib
import shlex
import subprocess
from pathlib import Path

from sol import cache
from sol.errors import SolBuildError

HERE = Path(__file__).parent
HEADER = HERE / "sol_dnnl.h"
SOURCE = HERE / "sol_dnnl.cpp"
#: every source of the glue: the oneDNN calls and SOL's own Winograd convolution
SOURCES = (SOURCE, HERE / "sol_winograd.cpp")
FILES = (HEADER, HERE / "sol_winograd.h", *SOURCES)
OBJECT_NAME = "sol_dnnl.o"


def source_hash() -> str:
    return hashlib.sha256(b"".join(f.read_bytes() for f in FILES)).hexdigest()


@functools.cache
def glue_object(cc: str, include_dir: Path, toolchain: str) -> Path:
    """The compiled glue object for compiler ``cc`` and oneDNN headers in ``include_dir`` (built on first use)."""
    key = hashlib.sha256(f"{source_hash()}|{cc}|{include_dir}|{toolchain}".encode()).hexdigest()

    def build(directory: Path) -> dict[str, str]:
        objects = []
        for source in SOURCES:  # one object per source, then one relocatable object for the models to link
            objects.append(directory / f"{source.stem}.part.o")
            _run([*shlex.split(cc), "-O2", "-std=c++17", "-fPIC", "-fvisibility=hidden", "-fopenmp", "-c",
                  str(source), f"-I{HERE}", f"-I{include_dir}", "-o", str(objects[-1])])
        _run([*shlex.split(cc), "-r", "-nostdlib", *map(str, objects), "-o", str(directory / OBJECT_NAME)])
        for part in objects:
            part.unlink()
        return {"what": "oneDNN glue", "toolchain": toolchain}

    return cache.get_or_build(key, build).file(OBJECT_NAME)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SolBuildError(f"building SOL's oneDNN glue failed ({shlex.join(command)}):\n{done.stderr[-3000:]}")
