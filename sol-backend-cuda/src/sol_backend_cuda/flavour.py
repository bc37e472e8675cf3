"""The CUDA flavour of generated code: one ``__global__`` kernel per Cluster, launched by host code.

Kernels: `sol_backend_cuda.launch_plan` maps each Cluster's loop nest onto the
GPU (grid-stride loops of thread blocks over the outer parallel dims, threads
over the innermost vector loop, or one warp per item with the vector loops over
its lanes and reductions by warp shuffles). Math: ``sol_cuda_*`` macros over
overloaded device functions (float stays float: ``expf``...).

The main loop runs on the host (`DeviceRuntime.main_loop` "host"). The ABI is
the one of every artifact plus the stream and the math word, as the last parameters:

    int <prefix>_forward(void* ctx, const void** inputs, const void** params, void** outputs,
                         void* workspace, int64_t batch, void* stream, int fp32_math)
    int <prefix>_prepare(void* ctx, const void** params, int64_t batch, void* stream, int fp32_math)

``ctx`` (the derived parameters), ``workspace`` and every entry of the
pointer tables are device pointers; the tables themselves are host arrays.
``stream`` is a ``cudaStream_t`` (NULL: the legacy default stream); the
kernels are launched on it in Cluster order and the call returns without
synchronising, with ``SOL_STATUS_LIBRARY`` when a launch failed. Errors that
kernels find (an index out of range) set a device status word that
``int <prefix>_status(void* stream)`` reads (synchronising that stream) and clears.
``fp32_math`` (`sol.precision.Fp32Math.word`: 1 for convolutions, 2 for
matrix products) says which fp32 library calls may use TF32 tensor cores in
this call; generated kernels always compute fp32 in fp32.

Conv (forward and both gradients), Linear, MatMul/BMM and the linear weight
gradient are cuDNN/cuBLAS calls where both libraries are found
(`sol_backend_cuda.dnn_module`, host code at the call's place with
``sol_stream`` and the libraries' slice of the workspace in scope), else
generated code like every other layer.

Build: ``nvcc`` for the compute capabilities ``cuda::cc`` (deploy option ``nvidia::cc``) (default: the
first CUDA device's, else 90); a list such as "80,90" builds a fat binary
(SASS for each, plus PTX of the newest for GPUs that come later).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import sol
from sol import log
from sol.codegen import Flavour
from sol.codegen.flavour import typed_math
from sol.codegen.lowering import column_reduction_groups
from sol.codegen.nest import Node
from sol.errors import SolBuildError, SolConfigError
from sol.ir import Layer, is_static
from sol.precision import STRICT, Fp32Math

from . import artifacts, libraries
from . import launch_plan as kmap
from .dnn_module import CudaDnnModule
from .glue import glue
from .toolkit import CC_KEY, DNN_KEY, MISSING, configured_cc, configured_nvcc, find_nvcc, library_dirs, nvcc_version

_log = log.get("cuda")
#: Bump when the CUDA code generated for the same graph changes (part of the cache key, like sol-core's
#: CODEGEN_VERSION): 2 = device-heap scratch checked (SOL_STATUS_SCRATCH), 3 = cuBLAS/cuDNN calls, scratch-capped grids and a 256 MB device heap
FLAVOUR_VERSION = "6"  # 4: batch norm training as reductions (lowers), 5: the math word (TF32 per call),
# 6: pooling gradients as gathers, column sums in two stages, a warp item's private arrays a lane's share
#: the device heap of modules whose kernels take per-thread scratch with new (CUDA's default: 8 MB)
HEAP_BYTES = 256 << 20
#: compute capability used when neither cuda::cc nor a device says otherwise
DEFAULT_CC = "90"
NVCC_FLAGS = ("-O3", "-std=c++17", "--compiler-options", "-fPIC", "-shared",
              # std::numeric_limits<T>::lowest() & co. are constexpr host functions: callable from kernels with this
              "--expt-relaxed-constexpr",
              # unused helpers and host variables (every module declares the whole prelude): noise in build logs
              "-diag-suppress", "177,550")



def _prelude() -> str:
    lines = [
        "// Prelude of the CUDA flavour: device math (float stays float), the warp reductions, launch helpers.",
        "#include <cuda_runtime.h>",
        "#include <cmath>",
        "#include <cstdint>",
        "#include <cstring>",
        "#include <limits>",
        "",
    ]
    # rint: round half to even (numpy's and ONNX's rule) under the default rounding mode
    lines += typed_math("sol_cuda", lambda name: f"::{name}", "static __device__ __forceinline__", {"round": "rint"})
    lines += [
        "",
        "// Warp reductions (butterfly: every lane ends with the bitwise same value, so lanes stay in step).",
        "template <class T> static __device__ __forceinline__ T sol_cuda_warp_sum(T v) {",
        "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);",
        "  return v;",
        "}",
        "template <class T> static __device__ __forceinline__ T sol_cuda_warp_prod(T v) {",
        "  for (int o = 16; o > 0; o >>= 1) v *= __shfl_xor_sync(0xffffffffu, v, o);",
        "  return v;",
        "}",
        "template <class T> static __device__ __forceinline__ T sol_cuda_warp_max(T v) {",
        "  for (int o = 16; o > 0; o >>= 1) { const T w = __shfl_xor_sync(0xffffffffu, v, o); "
        "v = (w > v || w != w) ? w : v; }",
        "  return v;",
        "}",
        "template <class T> static __device__ __forceinline__ T sol_cuda_warp_min(T v) {",
        "  for (int o = 16; o > 0; o >>= 1) { const T w = __shfl_xor_sync(0xffffffffu, v, o); "
        "v = (w < v || w != w) ? w : v; }",
        "  return v;",
        "}",
        "",
        "// Blocks of a grid-stride launch: enough for every item, at most " f"{kmap.MAX_BLOCKS}.",
        "static inline unsigned sol_cuda_blocks(int64_t items, int64_t per_block) {",
        "  const int64_t blocks = (items + per_block - 1) / per_block;",
        f"  return (unsigned)(blocks < {kmap.MAX_BLOCKS} ? blocks : {kmap.MAX_BLOCKS});",
        "}",
        "",
        "// Threads per block for ``items`` work items of ``per_item`` threads (1, or a warp): up to "
        f"{kmap.BLOCK_THREADS}, fewer when",
        "// the items are few, so that the blocks spread over the GPU's SMs (64 batch-norm channels of a warp each",
        "// were 8 blocks of 8 warps: 8 of an H100's 132 SMs busy, the rest idle). Whole warps, at least one.",
        f"#define SOL_CUDA_SPREAD_BLOCKS {kmap.SPREAD_BLOCKS}",
        "static inline int sol_cuda_threads(int64_t items, int64_t per_item) {",
        f"  const int64_t most = {kmap.BLOCK_THREADS} / per_item;",
        "  int64_t per_block = items / SOL_CUDA_SPREAD_BLOCKS;",
        "  per_block = per_block < 1 ? 1 : (per_block > most ? most : per_block);",
        f"  return (int)((per_block * per_item + {kmap.WARP - 1}) / {kmap.WARP} * {kmap.WARP});",
        "}",
        "",
        "// The device heap that kernels taking per-thread scratch (new) get (set in _init; CUDA's default is 8 MB).",
        f"#define SOL_CUDA_HEAP_BYTES ((size_t){HEAP_BYTES >> 20} << 20)",
        "// Blocks of a launch whose threads each hold ``bytes`` of device heap: at most half the heap live at once",
        "// (the rest: fragmentation and the allocator's own use); the grid-stride loop covers the other items.",
        "static inline unsigned sol_cuda_scratch_blocks(int64_t items, int64_t per_block, int64_t threads, int64_t bytes) {",
        "  const unsigned blocks = sol_cuda_blocks(items, per_block);",
        "  const int64_t fit = (int64_t)(SOL_CUDA_HEAP_BYTES / 2) / (threads * (bytes > 0 ? bytes : 1));",
        f"  const unsigned cap = (unsigned)(fit < 1 ? 1 : (fit < {kmap.MAX_BLOCKS} ? fit : {kmap.MAX_BLOCKS}));",
        "  return blocks < cap ? blocks : cap;",
        "}",
    ]
    return "\n".join(lines) + "\n"


PRELUDE = _prelude()


def parse_cc(value: str) -> list[str]:
    """``"80, 90"``, ``"8.0"``, ``"sm_90a"`` -> ["80", "90"], ["80"], ["90a"]; sorted, without duplicates."""
    found: list[str] = []
    for part in str(value).replace(";", ",").split(","):
        item = part.strip().lower().removeprefix("sm_").removeprefix("compute_").replace(".", "")
        if not item:
            continue
        if not re.fullmatch(r"\d{2,3}[af]?", item):
            raise SolConfigError(f"sol.config['{CC_KEY.name}'] = {value!r}: {part.strip()!r} is no compute capability; "
                                 "write e.g. \"90\" (H100), \"8.0\" or a list \"80,90\"")
        if item not in found:
            found.append(item)
    if not found:
        raise SolConfigError(f"sol.config['{CC_KEY.name}'] = {value!r} names no compute capability")
    return sorted(found, key=lambda cc: (int(re.sub(r"\D", "", cc)), cc))


def device_cc() -> str | None:
    """The compute capability of the first CUDA device (probed, cached), or None without one."""
    from sol.devices import probe
    from sol.plugins import registry

    backend = registry().backends.get("cuda")
    if backend is None:
        return None
    devices = probe(backend).devices
    if not devices:
        return None
    cc = str(devices[0].properties.get("compute_capability", ""))
    return cc.replace(".", "") or None


def gencode_flags(ccs: list[str]) -> list[str]:
    """SASS for every capability, plus PTX of the newest (JIT-compiled on GPUs newer than all of them)."""
    flags: list[str] = []
    for cc in ccs:
        flags += ["-gencode", f"arch=compute_{cc},code=sm_{cc}"]
    newest = ccs[-1]
    flags += ["-gencode", f"arch=compute_{newest},code=compute_{newest}"]
    return flags


class CudaFlavour(Flavour):
    """``__global__`` kernels per Cluster, host code launching them on a stream, built by nvcc.

    ``cc``: compute capabilities (default: ``cuda::cc``, else the device's, else 90); ``nvcc``: the
    compiler (default: ``cuda::nvcc``, searched as `toolkit.find_nvcc` does); ``dnn``: Conv/Linear/MatMul through
    cuDNN and cuBLAS (`sol_backend_cuda.dnn_module`; default ``cuda::dnn``) where both are found
    (`sol_backend_cuda.libraries`), else generated code.
    """

    name = "cuda"
    source_suffix = ".cu"
    library_suffix = ".so"
    # a thread per input element instead of a thread with a device-heap plane per (n, c) (see the base class)
    gathers_pool_grads = True

    def __init__(self, *, cc: str | None = None, nvcc: str | None = None, dnn: bool | None = None,
                 fp32_math: Fp32Math = STRICT) -> None:
        self._cc = cc
        self._nvcc = nvcc
        #: the math word a deployed library passes at every call (sol.deploy's nvidia::tf32); at run time in Python
        #: the runtime passes the caller's instead (`sol.precision.fp32_math`)
        self.deploy_fp32_math = fp32_math
        wanted = bool(sol.config.get(DNN_KEY.name, True)) if dnn is None else dnn
        found = libraries.found() if wanted else None
        self.libraries = found or ()
        self.dnn: CudaDnnModule | None = None
        if found:
            self.dnn = CudaDnnModule(" ".join(f"{lib.name}:{lib.lib}" for lib in found),
                                     autotune=bool(sol.config["autotuning"]))
        elif wanted:
            _log.info("CUDA code without cuBLAS/cuDNN calls: %s", libraries.missing_reason())

    # -- precision --------------------------------------------------------------------------------------
    def precision_missing(self, precision: str) -> str | None:
        """Why ``precision`` cannot be compiled: every generated kernel and library call is fp32 for now."""
        if precision == "fp32":
            return None
        return (f"the cuda backend has no {precision} kernels yet: generated code and its cuBLAS/cuDNN calls compute "
                "fp32 (the library calls with TF32 where PyTorch's fp32 settings allow it)")

    def lowers(self, layer: Layer) -> bool:
        if layer.op in ("batch_norm_train", "batch_norm_train_grad"):
            # statistics as means per (sample, channel), then per channel: the fused kernel reduces a channel on one
            # warp (resnet18's 64 channels: 64 warps for 16 x 56 x 56 pixels each; its training step ran 8.5x slower
            # than eager on an H100). Static batch sizes (training graphs are captured per batch).
            x = layer.inputs[0 if layer.op == "batch_norm_train" else 1]
            return (x.dtype == "float32" and x.rank >= 2
                    and all(is_static(s) for d, s in enumerate(x.shape) if d != 1))
        # a bias gradient's column sums in two stages: 12 warps summing 2048 rows each took 1.3-1.7 ms per layer of
        # the transformer encoder's training step on an H100 (sol.codegen.lowering.column_reduction_in_stages)
        return column_reduction_groups(layer) is not None

    def native_precision(self) -> str:
        return "fp32"  # precision="auto" on a GPU: fp32 until this backend has reduced-precision kernels

    # -- toolchain -----------------------------------------------------------------------------------
    @property
    def ccs(self) -> list[str]:
        if self._cc is not None:
            return parse_cc(self._cc)
        configured = configured_cc()
        if configured:
            return parse_cc(configured)
        return parse_cc(device_cc() or DEFAULT_CC)

    def nvcc(self) -> str:
        found = find_nvcc(self._nvcc or configured_nvcc())
        if found is None:
            store = artifacts.directory()
            carried = (f"; sol.config['{artifacts.ARTIFACTS_KEY.name}'] = {str(store)!r} holds no library built from "
                       "this model's source with these flags") if store is not None else ""
            raise SolBuildError(f"building CUDA code needs nvcc, which is {MISSING}{carried}")
        return found

    def flags(self) -> list[str]:
        debug = ["-g", "-lineinfo"] if sol.config.get("compiler::debug", False) else []
        return [*NVCC_FLAGS, *debug, *gencode_flags(self.ccs)]

    def compile_command(self, source: Path, library: Path) -> list[str]:
        """nvcc's command; with ``cuda::artifacts`` set, a copy of a carried library built from the same source
        and flags instead, or nvcc followed by storing its library there (`sol_backend_cuda.artifacts`)."""
        store = artifacts.directory()
        key = artifacts.source_key(Path(source).read_text(), self.flags()) if store is not None else ""
        carried = artifacts.find(store, key) if store is not None else None
        if carried is not None:
            artifacts.carried.append(key)
            _log.info("carried CUDA library %s for %s (no nvcc)", carried, source)
            return artifacts.import_command(carried, library)
        nvcc = self.nvcc()
        # -L: the wheels' nvcc.profile points at lib64, where the wheels have lib (static cudart: libcudart_static.a)
        command = [nvcc, *self.flags(), str(source), "-o", str(library), *(f"-L{d}" for d in library_dirs(nvcc))]
        command += self.library_flags()
        if store is None:
            return command
        artifacts.exported.append(key)
        match = re.search(r"for model '([^']*)'", Path(source).read_text()[:400])
        return artifacts.export_command(store, key, command, library, match.group(1) if match else "")

    def library_flags(self) -> list[str]:
        """Headers, link line and RUNPATH of cuBLAS/cuDNN (nothing without library calls)."""
        flags: list[str] = []
        for lib in self.libraries:
            flags += [f"-I{lib.include}", *lib.link_flags(), "-Xlinker", f"-rpath={lib.lib}"]
        return flags

    def toolchain_id(self) -> str:
        dnn = self.dnn.key() if self.dnn is not None else "no dnn"
        found = find_nvcc(self._nvcc or configured_nvcc())
        if found is None and artifacts.directory() is not None:
            # a machine without nvcc that runs carried libraries (compile_command copies them, or says what is missing)
            return f"cuda|v{FLAVOUR_VERSION}|carried from {artifacts.directory()}|{' '.join(self.flags())}|{dnn}"
        nvcc = self.nvcc()
        return f"cuda|v{FLAVOUR_VERSION}|{nvcc}|{nvcc_version(nvcc)}|{' '.join(self.flags())}|{dnn}"

    # -- code --------------------------------------------------------------------------------------------
    def prelude(self) -> str:
        return PRELUDE + (glue(self.dnn.autotune) if self.dnn is not None else "")

    def parallel_pragma(self, collapse: int, simd: bool) -> str:
        return ""  # loops become grid-stride indices (`kernels`), not pragmas

    def vector_pragma(self, reduction: tuple[str, str] | None) -> str:
        return ""

    def annotate(self, nodes: list[Node]) -> None:  # type: ignore[override]
        """Nothing to annotate: `render_module` maps the whole nest onto kernels."""

    def render_module(self, **context: Any) -> str:
        from .module import render_module

        return render_module(**context)

    def deploy_wrapper(self, **context: Any) -> str:
        """A deployed library: host inputs and outputs, weights uploaded once (`sol_backend_cuda.deploy`)."""
        from .deploy import render_wrapper

        return render_wrapper(fp32_math=self.deploy_fp32_math.word(), **context)

