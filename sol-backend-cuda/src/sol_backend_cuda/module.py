"""The CUDA source of one model: kernels per Cluster plus host entry points that launch them.

`sol.codegen.source.generate` hands over the rendered programs (the variables
of sol-core's ``module.j2``); this module turns every generated Cluster into
kernels (`sol_backend_cuda.kernels`) and every program into a host function
taking a stream (ABI in `sol_backend_cuda.flavour`). Library calls (a DNN
module's lines) stay host code at their place in the schedule.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sol.codegen.nest import Block, Loop, Node, Stmt

from . import kernels as kmap

#: what kernel code writes through ``sol_fail(&sol_status, ...)``: the module's device status word
STATUS_WORD = "sol_cuda_status_word"
#: what the flavour appends to every program's parameters: the stream, then the call's math word (which fp32
#: library calls may use TF32: `sol.precision.Fp32Math.word`, read by the runtime at each launch)
STREAM_PARAMETER = "void* stream, int sol_fp32_math"


@dataclass
class HostStep:
    """One Cluster in a host function: kernels to launch, or library lines to run."""

    index: int
    title: str
    kernels: list[kmap.Kernel] = field(default_factory=list)
    host_lines: list[str] = field(default_factory=list)


@dataclass
class HostProgram:
    name: str
    doc: str
    signature: str
    pointers: list[str]
    steps: list[HostStep]


def plan_program(program: Any, prefix: str) -> HostProgram:
    """The kernels and launches of one rendered program (``RenderedProgram`` of sol.codegen.source)."""
    host_names = kmap.host_variables(program.pointers)
    host_names.update({"N": "int64_t", "sol_seed_value": "int"})
    steps = []
    for c in program.clusters:
        step = HostStep(c.index, c.title)
        if _is_library_call(c.title):
            step.host_lines = [n.code for n in c.nodes if isinstance(n, Stmt)]
        else:
            name = f"{prefix}_{program.name}_c{c.index}"
            step.kernels = kmap.plan_kernels(c.nodes, name, host_names, c.title)
            for k in step.kernels:
                _to_status_word(k.body)
                k.scratch = kmap.scratch_bytes(k, host_names)
                if k.mode != "warp":  # a warp's lanes must not leave before its shuffles: only per-thread kernels
                    _guard_scratch(k.body)
        steps.append(step)
    return HostProgram(program.name, program.doc, f"{program.signature}, {STREAM_PARAMETER}", program.pointers, steps)


def _is_library_call(title: str) -> bool:
    # Cluster.title() of a DNN call, and the prepare step that packs the library's weights
    return title.startswith("DNN ") or title.startswith("library calls")


def _to_status_word(nodes: Sequence[Node]) -> None:
    for n in nodes:
        if isinstance(n, Stmt):
            n.code = n.code.replace("&sol_status", f"&{STATUS_WORD}")
        elif isinstance(n, (Loop, Block)):
            _to_status_word(n.body)


#: ``T* name = new T[...]`` in a kernel body: per-thread scratch from the device heap (8 MB by default)
_DEVICE_NEW = re.compile(r"^\s*[\w:]+\s*\*\s*(\w+)\s*=\s*new\s+[\w:]+\s*\[")


def _guard_scratch(nodes: list[Node]) -> None:
    """After every device-heap ``new``: a thread that got none reports SOL_STATUS_SCRATCH and stops.

    Why: kernels of the thread mapping take their scratch (a pooling gradient's whole input plane) with
    ``new``; thousands of threads at once exhaust CUDA's device heap, ``new`` returns null, and writing
    through it is an illegal address that ends the CUDA context (seen on an H100: resnet18's maxpool
    gradient, 4 x 64 threads x 112*112 doubles). The status word turns that into a SOL error instead.
    """
    index = 0
    while index < len(nodes):
        node = nodes[index]
        if isinstance(node, Stmt):
            match = _DEVICE_NEW.match(node.code)
            if match is not None:
                nodes.insert(index + 1, Stmt(f"if ({match.group(1)} == nullptr) {{ sol_fail(&{STATUS_WORD}, "
                                             "SOL_STATUS_SCRATCH); return; }"))
                index += 1
        elif isinstance(node, (Loop, Block)):
            _guard_scratch(node.body)
        index += 1


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    from sol.codegen.templates import environment

    return environment().from_string(TEMPLATE)  # the core's environment: nest.j2's render macro


def render_module(**context: Any) -> str:
    """The module's source; ``context``: the variables of sol-core's module.j2 (``flavour`` the CudaFlavour)."""
    programs = [plan_program(p, context["prefix"]) for p in context["programs"]]
    uses_heap = any(_DEVICE_NEW.search(line) for prog in programs for step in prog.steps for k in step.kernels
                    for line in kmap._all_code(k.body))
    return _template().render(cuda_programs=programs, status_word=STATUS_WORD, kmap=kmap, uses_heap=uses_heap,
                              **context)


TEMPLATE = r"""{% from "nest.j2" import render %}
// Generated by SOL {{ sol_version }} for model '{{ model }}' ({{ flavour.name }} flavour). Do not edit.
// Graph hash {{ graph_hash }}; {{ main|length }} clusters in forward, {{ prepare|length }} in prepare.
// Workspace: {{ workspace_c }} bytes at batch N; derived parameters: {{ derived_bytes }} bytes.
// Every Cluster is a __global__ kernel; {{ prefix }}_forward launches them in order on the caller's stream.
{{ flavour.prelude() }}

// Helpers shared by every flavour of the C++ templates (device and host).
template <class T> static __host__ __device__ __forceinline__ T sol_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <class T> static __host__ __device__ __forceinline__ T sol_min(T a, T b) { return (a < b || a != a) ? a : b; }
template <class T> static __host__ __device__ __forceinline__ T sol_select(bool c, T a, T b) { return c ? a : b; }
static __host__ __device__ __forceinline__ int64_t sol_ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
template <class T> static __host__ __device__ __forceinline__ T sol_floor_div(T a, T b) { T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
template <class T> static __host__ __device__ __forceinline__ T sol_ipow(T a, T b) { T r = 1; for (T i = 0; i < b; ++i) r *= a; return r; }
enum { SOL_STATUS_OK = 0, SOL_STATUS_INDEX = 1, SOL_STATUS_LIBRARY = 2, SOL_STATUS_SCRATCH = 3 };
// Errors kernels find (an index out of range): read and cleared by {{ prefix }}_status.
__device__ int {{ status_word }} = 0;
static __device__ __forceinline__ void sol_fail(int* status, int code) { atomicExch(status, code); }

{% for c in consts %}
// const {{ c.name }} {{ c.shape }}
static __device__ const {{ c.ctype }} {{ c.var }}[{{ c.count }}] = { {{ c.values }} };
{% endfor %}

static int sol_seed_value = 0;
static int64_t sol_derived_total = {{ derived_bytes }};
static inline int64_t sol_derived_reserve(int64_t bytes) {
  const int64_t offset = (sol_derived_total + 63) / 64 * 64;
  sol_derived_total = offset + bytes;
  return offset;
}
{% for line in library_globals %}
{{ line }}
{% endfor %}

{{ flavour.exported() }} int {{ prefix }}_init(int device) {
  (void)device;  // kernels run on the current device of the calling thread (the framework's)
{% if uses_heap %}
  // Kernels below take per-thread scratch with new: a device heap of SOL_CUDA_HEAP_BYTES instead of CUDA's 8 MB
  // (their launches hold at most half of it at once). Only possible before the context's first kernel that
  // allocates; a failure leaves the smaller heap (launches then cap to it too) and is cleared, not reported later.
  size_t sol_heap = 0;
  if (cudaDeviceGetLimit(&sol_heap, cudaLimitMallocHeapSize) == cudaSuccess && sol_heap < SOL_CUDA_HEAP_BYTES)
    cudaDeviceSetLimit(cudaLimitMallocHeapSize, SOL_CUDA_HEAP_BYTES);
  (void)cudaGetLastError();
{% endif %}
{% if library_init %}
  static int sol_initialised = 0;
  if (sol_initialised) return 0;
{% for line in library_init %}
  {{ line }}
{% endfor %}
  sol_initialised = 1;
{% endif %}
  return 0;
}

{{ flavour.exported() }} void {{ prefix }}_seed(int seed) { sol_seed_value = seed; }

{% if flavour.dnn %}
// SOL's buffers, then (256-byte aligned) the libraries' own workspace: cuDNN's algorithms, cuBLAS(Lt)'s kernels.
static inline int64_t sol_library_workspace_offset(int64_t N) {
  (void)N;
  return (int64_t)(({{ workspace_c }}) + 255) / 256 * 256;
}
{% endif %}
{{ flavour.exported() }} int64_t {{ prefix }}_workspace_size(int64_t batch) {
  const int64_t N = batch;
  (void)N;
{% if flavour.dnn %}
  return sol_library_workspace_offset(N) + (int64_t)SOL_LIBRARY_WORKSPACE;
{% else %}
  return {{ workspace_c }};
{% endif %}
}

{{ flavour.exported() }} int64_t {{ prefix }}_derived_size(void) { return sol_derived_total; }

// The errors kernels reported since the last call (SOL_STATUS_INDEX...), then cleared; waits for ``stream``.
{{ flavour.exported() }} int {{ prefix }}_status(void* stream) {
  int status = 0;
  const int zero = 0;
  cudaStream_t sol_stream = (cudaStream_t)stream;
  if (cudaMemcpyFromSymbolAsync(&status, {{ status_word }}, sizeof status, 0, cudaMemcpyDeviceToHost, sol_stream) != cudaSuccess
      || cudaMemcpyToSymbolAsync({{ status_word }}, &zero, sizeof zero, 0, cudaMemcpyHostToDevice, sol_stream) != cudaSuccess
      || cudaStreamSynchronize(sol_stream) != cudaSuccess) return SOL_STATUS_LIBRARY;
  return status;
}
{% for program in cuda_programs %}

// ======== {{ program.doc }}
{% for step in program.steps %}
{% for k in step.kernels %}

// ---- cluster {{ step.index }}: {{ step.title }}
// {{ k.describe() }}
{% for line in kmap.kernel_head(k) %}
{{ line }}
{% endfor %}
{{ render(k.body, "    ") }}
{% for line in kmap.kernel_tail(k) %}
{{ line }}
{% endfor %}
{% endfor %}
{% endfor %}

// {{ program.doc }}; launches on ``stream`` (a cudaStream_t), never waits for it.
{{ flavour.exported() }} int {{ prefix }}_{{ program.name }}({{ program.signature }}) {
  const int64_t N = batch;
  (void)N;
  char* derived = (char*)ctx;
  (void)derived;
  cudaStream_t sol_stream = (cudaStream_t)stream;
  (void)sol_stream;
  (void)sol_fp32_math;
{% if flavour.dnn and "void* workspace" in program.signature %}
  void* sol_library_workspace = (char*)workspace + sol_library_workspace_offset(N);
  (void)sol_library_workspace;
{% endif %}
  int sol_status = SOL_STATUS_OK;
{% for p in program.pointers %}
  {{ p }}
{% endfor %}
{% for step in program.steps %}

  // ---- cluster {{ step.index }}: {{ step.title }}
{% for line in step.host_lines %}
  {{ line }}
{% endfor %}
{% for k in step.kernels %}
{% for line in kmap.launch_lines(k) %}
  {{ line }}
{% endfor %}
{% endfor %}
{% endfor %}
  if (cudaGetLastError() != cudaSuccess) sol_status = SOL_STATUS_LIBRARY;
  return sol_status;
}
{% endfor %}
"""
