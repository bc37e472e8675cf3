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
#: every source of the glue: the oneDNN calls, SOL's own convolutions (Winograd, grouped/depthwise) and MKL's Linear
SOURCES = (SOURCE, HERE / "sol_winograd.cpp", HERE / "sol_grouped.cpp", HERE / "sol_dnnl_rnn.cpp", HERE / "sol_blas.cpp",
           HERE / "sol_depthwise.cpp")
FILES = (HEADER, HERE / "sol_kernels.h", HERE / "sol_blas.h", HERE / "sol_winograd.h", HERE / "sol_grouped.h", HERE / "sol_dnnl_rnn.h",
         HERE / "sol_depthwise.h", *SOURCES)
OBJECT_NAME = "sol_dnnl.o"


def source_hash() -> str:
    return hashlib.sha256(b"".join(f.read_bytes() for f in FILES)).hexdigest()


@functools.cache
def glue_object(cc: str, include_dir: Path, toolchain: str) -> Path:
    """The compiled glue object for compiler ``cc`` and oneDNN headers in ``include_dir`` (built on first use)."""
    key = hashlib.sha256(f"{source_hash()}|{cc}|{include_dir}|{toolchain}".encode()).hexdigest()

    def build(directory: Path) -> dict[str, str]:
        # One object per source, compiled side by side (the glue is most of a first compile's time:
        # ~6 s for sol_dnnl.cpp's oneDNN templates, ~3 s for Winograd, ~2 s for the grouped kernel), then one relocatable object.
        objects = [directory / f"{source.stem}.part.o" for source in SOURCES]
        run_all([[*shlex.split(cc), "-O2", "-std=c++17", "-fPIC", "-fvisibility=hidden", "-fopenmp", "-c",
                   str(source), f"-I{HERE}", f"-I{include_dir}", "-o", str(obj)]
                  for source, obj in zip(SOURCES, objects, strict=True)])
        run_all([[*shlex.split(cc), "-r", "-nostdlib", *map(str, objects), "-o", str(directory / OBJECT_NAME)]])
        for part in objects:
            part.unlink()
        return {"what": "oneDNN glue", "toolchain": toolchain}

    return cache.get_or_build(key, build).file(OBJECT_NAME)


def run_all(commands: list[list[str]]) -> None:
    """Runs ``commands`` concurrently; the first that fails raises with its command line and stderr."""
    running = [(command, subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
               for command in commands]
    results = [(command, process.communicate()[1]) for command, process in running]
    for (command, stderr), (_, process) in zip(results, running, strict=True):
        if process.returncode != 0:
            raise SolBuildError(f"building SOL's oneDNN glue failed ({shlex.join(command)}):\n{stderr[-3000:]}")
