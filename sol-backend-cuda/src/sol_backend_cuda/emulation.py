"""The CUDA flavour's generated code on the host: every lane of a warp a fiber, for tests without a GPU.

GPU time is scarce (a lent machine, minutes per task), and a mapping bug of
`sol_backend_cuda.launch_plan` (which lane takes which iteration, where a warp
combines its partial sums) compiles fine and only shows as wrong numbers on a
GPU. This module builds a model's CUDA source with the host compiler against a
stand-in ``cuda_runtime.h`` that runs kernels the way a GPU does in the points
the mapping relies on:

* a launch runs one block (the kernels' grid-stride loops cover every work
  item with any grid) of the launch's threads, warp after warp;
* the 32 lanes of a warp are 32 fibers on the launching thread, run in rounds
  (emulation_runtime/cuda_runtime.h); ``__shfl_xor_sync`` exchanges values
  through the warp's mailbox between two rounds, so the lanes meet at every
  shuffle as a warp does, and a lane that leaves the kernel drops out;
* ``__device__`` memory is host memory (the stand-in libcudart of the runtime
  tests allocates host memory for "device" buffers), per-thread ``new`` is
  the host heap, and the symbol copies of the status word are ``memcpy``.

Library calls (cuBLAS, cuDNN) are not emulated: build with ``dnn=False``.
What it cannot show: timing, occupancy, and faults of real device memory.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from sol.errors import SolBuildError

#: the stand-in for CUDA's runtime header: what the generated code uses of CUDA C++ and of the runtime API
RUNTIME_HEADER = Path(__file__).parent / "emulation_runtime" / "cuda_runtime.h"


#: a launch of the generated host code: ``name<<<grid, threads, 0, stream>>>(``
_LAUNCH = re.compile(r"(\w+)<<<(.+), ([^,]+), 0, (\w+)>>>\(")


def emulated_source(source: str) -> str:
    """The CUDA source with its launches as calls of the emulator (`RUNTIME_HEADER`)."""
    if "cublas" in source or "cudnn" in source:
        raise SolBuildError("the CUDA emulation runs generated kernels only: build the source with dnn=False")
    return _LAUNCH.sub(lambda m: f"sol_emu_launch({m.group(1)}, {m.group(2)}, {m.group(3)})(", source)


def build(source: str, library: Path) -> Path:
    """``library``: the CUDA source built by the host C++ compiler against the emulation (threads, not a GPU)."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise SolBuildError("the CUDA emulation needs a host C++ compiler (g++)")
    library = Path(library)
    directory = library.parent
    (directory / "emulation").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(RUNTIME_HEADER, directory / "emulation" / "cuda_runtime.h")
    cpp = directory / (library.stem + "_emulated.cpp")
    cpp.write_text(emulated_source(source))
    done = subprocess.run([compiler, "-std=c++20", "-O1", "-fPIC", "-shared", "-w",
                           f"-I{directory / 'emulation'}", str(cpp), "-o", str(library)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SolBuildError(f"building the emulated CUDA source {cpp} failed:\n{done.stderr[-3000:]}")
    return library
