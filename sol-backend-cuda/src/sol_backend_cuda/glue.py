"""The C++ that generated CUDA modules use to call cuBLAS, cuBLASLt and cuDNN (added to the prelude when the
flavour has library calls).

Why each choice, since none of this can be run where it is written:

* Handles are created once, in ``<prefix>_init`` (``sol_dnn_init``); every
  call binds them to the caller's stream (``cublasSetStream``,
  ``cudnnSetStream``) and gives them a slice of SOL's workspace (``cublasSetWorkspace``,
  the ``workSpace`` argument of cuDNN and cuBLASLt), which comes from the
  owner's allocator (PyTorch's caching allocator), so no library allocates
  or synchronises inside a call.
* Descriptors, heuristics and algorithms are set up once per batch size, on
  the host only (``cudnnGetConvolution*Algorithm_v7`` and
  ``cublasLtMatmulAlgoGetHeuristic`` read no device memory): a new batch
  size costs host calls, never a synchronisation.
* fp32 is computed as eager PyTorch would with the caller's settings as of
  the call: every entry point takes a math word (`sol.precision.Fp32Math.word`:
  ``SOL_MATH_CONV_TF32``, ``SOL_MATH_MATMUL_TF32``), which the runtime reads
  from the frontend at each launch. Without a bit, strict fp32
  (``CUDNN_FMA_MATH``, ``CUBLAS_COMPUTE_32F``); with it, TF32 tensor cores
  (``CUDNN_TENSOR_OP_MATH``, ``CUBLAS_COMPUTE_32F_FAST_TF32``). The math mode
  is part of what a call sets up lazily, like the batch size: a convolution
  keeps one descriptor and algorithm per mode (cuDNN ties the math type to the
  convolution descriptor, and algorithms differ between the modes), a Linear
  one cuBLASLt operation and heuristic algorithm per mode; cuBLAS GEMMs name
  the compute type in each call (``cublasGemmEx``). Flipping a setting
  between calls costs host calls at the first call in the new mode, never a
  synchronisation (autotuning aside: it times the mode it will run).
  A strict convolution only takes algorithms that cuDNN reports as
  ``CUDNN_FMA_MATH`` (what PyTorch asserts too); a TF32 one takes the math type
  cuDNN reports with the algorithm, as PyTorch does.
* A host mutex serialises the library calls of one module (one handle per
  library, re-bound to each caller's stream).
"""

from __future__ import annotations

import functools
from pathlib import Path

from sol.precision import Fp32Math

#: bytes of SOL's workspace reserved for the libraries' own workspace (cuDNN algorithms, cuBLAS(Lt) kernels);
#: algorithms needing more are not chosen
LIBRARY_WORKSPACE_BYTES = 64 << 20

#: the glue's C++ (package data), pasted into the prelude after the definitions it needs
SOURCE = Path(__file__).with_name("native") / "library_glue.cuh"


def glue(autotune: bool = False) -> str:
    """The glue's C++: the workspace size, the math word's bits and whether convolutions are autotuned, then the
    calls (``native/library_glue.cuh``)."""
    return (f"#define SOL_LIBRARY_WORKSPACE ((size_t){LIBRARY_WORKSPACE_BYTES}U)\n"
            f"#define SOL_MATH_CONV_TF32 {int(Fp32Math.CONV_TF32)}\n"
            f"#define SOL_MATH_MATMUL_TF32 {int(Fp32Math.MATMUL_TF32)}\n"
            f"#define SOL_CUDA_AUTOTUNE {int(autotune)}\n" + _source())


@functools.cache
def _source() -> str:
    return SOURCE.read_text()
