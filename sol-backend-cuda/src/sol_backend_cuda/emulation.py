"""The CUDA flavour's generated code on the host: every lane of a warp a thread, for tests without a GPU.

GPU time is scarce (a lent machine, minutes per task), and a mapping bug of
`sol_backend_cuda.kernels` (which lane takes which iteration, where a warp
combines its partial sums) compiles fine and only shows as wrong numbers on a
GPU. This module builds a model's CUDA source with the host compiler against a
stand-in ``cuda_runtime.h`` that runs kernels the way a GPU does in the points
the mapping relies on:

* a launch runs one block (the kernels' grid-stride loops cover every work
  item with any grid) of the launch's threads, warp after warp;
* the 32 lanes of a warp are 32 threads; ``__shfl_xor_sync`` exchanges values
  through the warp's mailbox between two barriers, so the lanes meet at every
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
RUNTIME_HEADER = r"""// cuda_runtime.h of sol_backend_cuda.emulation: CUDA's execution model on host threads (tests only).
#pragma once
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <math.h>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct sol_emu_dim3 { unsigned x = 0, y = 0, z = 0; };
inline thread_local sol_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

typedef void* cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
enum cudaLimit { cudaLimitMallocHeapSize = 2 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit) { *value = (size_t)8 << 20; return cudaSuccess; }
inline cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
template <class T> cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* source, size_t bytes, size_t offset,
                                                       cudaMemcpyKind, cudaStream_t) {
  memcpy((char*)&symbol + offset, source, bytes);
  return cudaSuccess;
}
template <class T> cudaError_t cudaMemcpyFromSymbolAsync(void* target, const T& symbol, size_t bytes, size_t offset,
                                                         cudaMemcpyKind, cudaStream_t) {
  memcpy(target, (const char*)&symbol + offset, bytes);
  return cudaSuccess;
}
inline int atomicExch(int* address, int value) { return __atomic_exchange_n(address, value, __ATOMIC_SEQ_CST); }

// A warp: its lanes meet at every shuffle (each writes its value, all wait, each reads its partner's, all wait).
struct sol_emu_warp {
  explicit sol_emu_warp(std::ptrdiff_t lanes) : meet(lanes) {}
  std::barrier<> meet;
  alignas(16) unsigned char mailbox[32][16];
};
inline thread_local sol_emu_warp* sol_emu_this_warp = nullptr;

template <class T> T __shfl_xor_sync(unsigned, T value, int lane_mask) {
  static_assert(sizeof(T) <= 16, "a shuffled value fits a mailbox slot");
  sol_emu_warp* warp = sol_emu_this_warp;
  const unsigned lane = threadIdx.x & 31u;
  memcpy(warp->mailbox[lane], &value, sizeof(T));
  warp->meet.arrive_and_wait();
  T partner;
  memcpy(&partner, warp->mailbox[lane ^ (unsigned)lane_mask], sizeof(T));
  warp->meet.arrive_and_wait();
  return partner;
}

// kernel<<<grid, threads, 0, stream>>>(args) becomes sol_emu_launch(kernel, grid, threads)(args): one block of
// ``threads`` threads, its warps one after another, the lanes of a warp concurrently.
template <class... Params> struct sol_emu_launcher {
  void (*kernel)(Params...);
  unsigned threads;
  template <class... Args> void operator()(Args... args) const {
    for (unsigned first = 0; first < threads; first += 32) {
      const unsigned lanes = threads - first < 32 ? threads - first : 32;
      sol_emu_warp warp((std::ptrdiff_t)lanes);
      std::vector<std::thread> running;
      for (unsigned lane = 0; lane < lanes; ++lane)
        running.emplace_back([&, lane] {
          threadIdx.x = first + lane; blockIdx.x = 0; blockDim.x = threads; gridDim.x = 1;
          sol_emu_this_warp = &warp;
          kernel(args...);
          warp.meet.arrive_and_drop();  // a lane that is done no longer holds the others at a shuffle
        });
      for (std::thread& t : running) t.join();
    }
  }
};
template <class... Params> sol_emu_launcher<Params...> sol_emu_launch(void (*kernel)(Params...), unsigned,
                                                                      unsigned threads) {
  return {kernel, threads};
}
"""

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
    (directory / "emulation" / "cuda_runtime.h").write_text(RUNTIME_HEADER)
    cpp = directory / (library.stem + "_emulated.cpp")
    cpp.write_text(emulated_source(source))
    done = subprocess.run([compiler, "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-w",
                           f"-I{directory / 'emulation'}", str(cpp), "-o", str(library)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SolBuildError(f"building the emulated CUDA source {cpp} failed:\n{done.stderr[-3000:]}")
    return library
