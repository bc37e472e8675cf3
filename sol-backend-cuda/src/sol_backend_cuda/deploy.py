"""``sol.deploy(..., device="cuda")``: a shared library plus header that runs a model on an NVIDIA GPU.

The library's code is the CUDA flavour's (kernels per Cluster, launched by
host code), built by nvcc for the option ``nvidia::cc`` (default: ``cuda::cc``,
else the first GPU's compute capability, else 90), so it builds on a machine
without a GPU; a list ("80,90") makes a fat binary. The CUDA runtime is linked
statically: the machine it runs on needs the NVIDIA driver and nothing else.

The API is the one of every deployed library (``<func>_init``, ``<func>_seed``,
``<func>(ctx, in..., &out...)``) with host inputs and outputs: ``<func>_init``
uploads the weights to the GPU once; a call copies the inputs in, launches
the kernels on the stream ``ctx`` (a ``cudaStream_t``; NULL: the legacy default
stream), copies the outputs back and waits for that stream.

fp32 math: a deployed library has no framework to follow, so the option
``nvidia::tf32`` says which library calls may use TF32 ("off", the default:
strict fp32; "conv", "matmul" or "all"), passed to the model's code as its
math word at every call. Today's deployed libraries run generated kernels
only (no cuBLAS/cuDNN: nothing to install but the driver), which compute
fp32 in fp32, so any value but "off" is a clear error rather than a setting
that does nothing.

sol-core's deploy driver compiles with a GCC-style command line (``-c``,
``-fPIC``, ``-fvisibility=hidden``, ``-shared``, ``-Wl,...``): `compiler` is
`sol_backend_cuda.deploy_driver`, which hands compiling to nvcc (host flags
through ``-Xcompiler``) and linking to g++ with CUDA's static runtime.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, ClassVar

from sol.errors import SolBuildError, SolInputError, SolUnsupportedError
from sol.precision import Fp32Math
from sol.records import DeployLibraries, DeployTarget

from .toolkit import MISSING, configured_nvcc, find_nvcc

#: the deploy option naming the compute capabilities (issue 30's name; ``cuda::cc`` is accepted as well)
CC_OPTION = "nvidia::cc"
#: the deploy option saying which fp32 library calls may use TF32 (value -> sol.precision.Fp32Math)
TF32_OPTION = "nvidia::tf32"
TF32_VALUES = {"off": Fp32Math(), "conv": Fp32Math(conv_tf32=True), "matmul": Fp32Math(matmul_tf32=True),
               "all": Fp32Math(conv_tf32=True, matmul_tf32=True)}
INSTALL_HINT = 'pip install "sol-backend-cuda[toolchain]" (nvcc from NVIDIA\'s wheels), or a CUDA toolkit with nvcc and g++'
NOTE = ("built by nvcc with CUDA's runtime linked statically: the machine it runs on needs only the NVIDIA driver "
        "(libcuda.so.1) and a GPU of the compute capabilities it was built for; inputs and outputs are host memory, "
        "ctx is the cudaStream_t the kernels run on (NULL: the default stream)")


class CudaDeployTarget(DeployTarget):
    device_type = "cuda"
    description = "NVIDIA GPUs (nvcc; host inputs and outputs, kernels on a CUDA stream)"
    install_hint = INSTALL_HINT
    options: ClassVar[dict[str, str]] = {CC_OPTION: "", "cuda::cc": "", TF32_OPTION: "off"}

    def nvcc(self) -> str:
        found = find_nvcc(configured_nvcc())
        if found is None:
            raise SolBuildError(f"sol.deploy for cuda needs nvcc, which is {MISSING}")
        return found

    def compiler(self) -> list[str]:
        return [sys.executable, "-m", "sol_backend_cuda.deploy_driver"]

    def flags(self) -> list[str]:
        return ["-O3"]

    def check_kind(self, kind: str, options: Mapping[str, str]) -> None:
        if kind != "shared":
            raise SolUnsupportedError("sol.deploy for cuda builds target='lib::shared' only: the library carries the "
                                      "CUDA runtime and its kernels' registration, which a static archive would leave "
                                      "to the application's link line")

    def option_flags(self, options: Mapping[str, str]) -> list[str]:
        # What the driver needs besides the GCC-style line: nvcc, and the architectures of the fat binary.
        return [f"--sol-nvcc={self.nvcc()}", f"--sol-cc={','.join(self.ccs(options))}"]

    @staticmethod
    def ccs(options: Mapping[str, str]) -> list[str]:
        from .flavour import CudaFlavour

        return CudaFlavour(cc=_cc_option(options)).ccs

    def flavour(self, options: Mapping[str, str]) -> Any:
        from .flavour import CudaFlavour  # lazy: importing the plugin stays cheap

        # Generated code only (no cuBLAS/cuDNN call): the library needs no NVIDIA library beyond the driver.
        math = tf32_option(options)
        if math.word():
            raise SolUnsupportedError(
                f"sol.deploy option {TF32_OPTION}={options.get(TF32_OPTION)!r}: a deployed CUDA library runs SOL's "
                "generated kernels only (no cuBLAS/cuDNN calls, so that it needs nothing but the driver), which "
                f"compute fp32 in fp32; TF32 applies to library calls. Leave {TF32_OPTION} 'off'.")
        return CudaFlavour(cc=_cc_option(options), nvcc=self.nvcc(), dnn=False, fp32_math=math)

    def libraries(self, flavour: Any, options: Mapping[str, str]) -> DeployLibraries:
        return DeployLibraries(notes=(NOTE,))


def _cc_option(options: Mapping[str, str]) -> str | None:
    new, old = str(options.get(CC_OPTION, "") or "").strip(), str(options.get("cuda::cc", "") or "").strip()
    if new and old and new != old:
        raise SolInputError(f"sol.deploy options {CC_OPTION}={new!r} and cuda::cc={old!r} disagree; they are two "
                            f"names of one option: give only {CC_OPTION}")
    return (new or old) or None


def tf32_option(options: Mapping[str, str]) -> Fp32Math:
    """The fp32 math of ``nvidia::tf32`` ("off" when not given), or a SOL error naming the values."""
    value = str(options.get(TF32_OPTION, "off") or "off").strip().lower()
    if value not in TF32_VALUES:
        raise SolInputError(f"sol.deploy option {TF32_OPTION}={options.get(TF32_OPTION)!r} is not one of "
                            f"{sorted(TF32_VALUES)} (which fp32 library calls may use TF32; 'off': none)")
    return TF32_VALUES[value]


def render_wrapper(**context: Any) -> str:
    """The library's source: the model's CUDA code plus the C API (`CudaFlavour.deploy_wrapper`)."""
    from sol.codegen.templates import environment

    return environment().from_string(WRAPPER).render(**context)


WRAPPER = r"""// {{ lib_name }}: a standalone CUDA library generated by SOL {{ sol_version }} (sol.deploy) for model '{{ model }}'.
// The model's code below has hidden entry points ({{ impl }}_*, launching kernels on a stream); only the API of
// {{ lib_name }}.h is exported. Inputs and outputs are host memory; weights, derived parameters and workspace
// live on the GPU chosen by {{ func }}_init.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1  // dladdr: find the weights file beside the library
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

{{ model_source }}

// The library is built for batch {{ batch }}: the model's code takes it as its runtime batch N.
// The math word of every call (sol.deploy option nvidia::tf32): which fp32 library calls may use TF32.
#define SOL_DEPLOY_FP32_MATH {{ fp32_math }}
#define SOL_API extern "C" __attribute__((visibility("default")))

// Weak, so an application can route allocations through its own allocator and
// two SOL libraries linked into one program share one definition.
SOL_API __attribute__((weak)) void* sol_ext_malloc(size_t bytes) {
  void* ptr = NULL;
  return posix_memalign(&ptr, 64, bytes ? bytes : 1) == 0 ? ptr : NULL;
}

SOL_API __attribute__((weak)) void sol_ext_free(void* ptr) { free(ptr); }

static const int sol_param_count = {{ params|length }};
static const uint64_t sol_param_offsets[{{ [params|length, 1]|max }}] = { {{ params|map(attribute="offset")|join(", ") or "0" }} };
static const uint64_t sol_weights_bytes = UINT64_C({{ weights_bytes }});
static const uint64_t sol_input_bytes[{{ [inputs|length, 1]|max }}] = { {{ inputs|map(attribute="bytes")|join(", ") or "0" }} };
static const uint64_t sol_output_bytes[{{ [outputs|length, 1]|max }}] = { {{ outputs|map(attribute="bytes")|join(", ") or "0" }} };
static const void* sol_params[{{ [params|length, 1]|max }}];  // device addresses inside sol_weights_device
static char* sol_weights_device = NULL;
static char* sol_derived = NULL;
static int sol_device = 0;
static pthread_once_t sol_once = PTHREAD_ONCE_INIT;
static int sol_seed_current = 0;

// The device buffers of one caller: workspace, inputs and outputs. The first caller's are kept; a concurrent
// caller allocates its own.
struct sol_buffers {
  void* workspace;
  void* inputs[{{ [inputs|length, 1]|max }}];
  void* outputs[{{ [outputs|length, 1]|max }}];
};
static struct sol_buffers sol_shared_buffers;
static pthread_mutex_t sol_buffers_lock = PTHREAD_MUTEX_INITIALIZER;

static void sol_die(const char* what) {
  // The C API has no error channel: running with missing weights would give silently wrong results.
  fprintf(stderr, "{{ lib_name }}: %s\n", what);
  abort();
}

static void sol_check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  char message[512];
  snprintf(message, sizeof message, "%s failed on CUDA device %d: %s (%s)", what, sol_device,
           cudaGetErrorString(status), cudaGetErrorName(status));
  sol_die(message);
}

static void* sol_device_alloc(size_t bytes, const char* what) {
  void* ptr = NULL;
  sol_check(cudaMalloc(&ptr, bytes ? bytes : 1), what);
  return ptr;
}

{% if embedded %}
// The weights, embedded at build time from {{ blob_file }} (assembler .incbin: no giant C array to compile).
__asm__(".section .rodata.sol_weights,\"a\"\n"
        ".balign 64\n"
        "{{ blob_symbol }}:\n"
        ".incbin \"{{ blob_file }}\"\n"
        ".previous\n");
extern "C" const char {{ blob_symbol }}[] __attribute__((visibility("hidden")));

static const char* sol_weights(void) { return {{ blob_symbol }}; }
static void sol_release_weights(const char* weights) { (void)weights; }
{% else %}
// The weights live in a separate file: {{ weights_env }} names it, else {{ weights_file }} beside the
// library (or beside the program it is linked into).
static const char sol_weights_magic[8] = { {{ magic }} };
static const uint64_t sol_weights_id = UINT64_C({{ weights_id }});

static FILE* sol_open_weights(char* path, size_t size) {
  const char* env = getenv("{{ weights_env }}");
  if (env && *env) {
    snprintf(path, size, "%s", env);
    return fopen(path, "rb");
  }
  Dl_info info;
  const char* dir_end = NULL;
  if (dladdr((void*)&sol_open_weights, &info) && info.dli_fname) dir_end = strrchr(info.dli_fname, '/');
  if (dir_end) snprintf(path, size, "%.*s/{{ weights_file }}", (int)(dir_end - info.dli_fname), info.dli_fname);
  else snprintf(path, size, "{{ weights_file }}");
  return fopen(path, "rb");
}

static const char* sol_weights(void) {
  char path[4096], message[4300];
  FILE* file = sol_open_weights(path, sizeof path);
  if (!file) {
    snprintf(message, sizeof message, "cannot open the weights file %s; set {{ weights_env }} to its path", path);
    sol_die(message);
  }
  unsigned char header[64];
  uint64_t id = 0, bytes = 0;
  if (fread(header, 1, sizeof header, file) != sizeof header) sol_die("the weights file is truncated");
  memcpy(&id, header + 8, 8);
  memcpy(&bytes, header + 16, 8);
  if (memcmp(header, sol_weights_magic, 8) != 0 || id != sol_weights_id || bytes != sol_weights_bytes) {
    snprintf(message, sizeof message, "%s is not the weights file of this library (deployed together as {{ weights_file }})", path);
    sol_die(message);
  }
  char* data = (char*)malloc(sol_weights_bytes ? sol_weights_bytes : 1);
  if (!data) sol_die("out of memory loading the weights");
  if (fread(data, 1, sol_weights_bytes, file) != sol_weights_bytes) sol_die("the weights file is truncated");
  fclose(file);
  return data;
}
static void sol_release_weights(const char* weights) { free((void*)weights); }
{% endif %}

static void sol_alloc_buffers(struct sol_buffers* b) {
  b->workspace = sol_device_alloc((size_t){{ impl }}_workspace_size({{ batch }}), "cudaMalloc of the workspace");
  for (int i = 0; i < {{ inputs|length }}; ++i) b->inputs[i] = sol_device_alloc(sol_input_bytes[i], "cudaMalloc of an input");
  for (int i = 0; i < {{ outputs|length }}; ++i) b->outputs[i] = sol_device_alloc(sol_output_bytes[i], "cudaMalloc of an output");
}

static void sol_free_buffers(struct sol_buffers* b) {
  cudaFree(b->workspace);
  for (int i = 0; i < {{ inputs|length }}; ++i) cudaFree(b->inputs[i]);
  for (int i = 0; i < {{ outputs|length }}; ++i) cudaFree(b->outputs[i]);
}

static void sol_initialise(void) {
  sol_check(cudaSetDevice(sol_device), "cudaSetDevice");
  const char* weights = sol_weights();
  sol_weights_device = (char*)sol_device_alloc(sol_weights_bytes, "cudaMalloc of the weights");
  sol_check(cudaMemcpy(sol_weights_device, weights, sol_weights_bytes, cudaMemcpyHostToDevice), "uploading the weights");
  sol_release_weights(weights);
  for (int i = 0; i < sol_param_count; ++i) sol_params[i] = sol_weights_device + sol_param_offsets[i];
  if ({{ impl }}_init(sol_device) != 0) sol_die("initialising the model failed");
  sol_derived = (char*)sol_device_alloc((size_t){{ impl }}_derived_size(), "cudaMalloc of the derived parameters");
  // Derived parameters (e.g. BatchNorm folded into convolutions) are computed once, here, by the model's prepare program.
  if ({{ impl }}_prepare(sol_derived, (const void**)sol_params, 1, NULL, SOL_DEPLOY_FP32_MATH) != 0) sol_die("launching the prepare program failed");
  const int status = {{ impl }}_status(NULL);  // waits for prepare
  if (status != 0) sol_die("computing the derived parameters failed (a kernel reported an error)");
  sol_alloc_buffers(&sol_shared_buffers);
}

SOL_API void {{ func }}_init(int deviceIdx) {
  // the first call picks the GPU (CUDA ordinal deviceIdx); the weights are uploaded to it once
  static int chosen = 0;
  if (!__atomic_exchange_n(&chosen, 1, __ATOMIC_SEQ_CST)) sol_device = deviceIdx;
  pthread_once(&sol_once, sol_initialise);
}

SOL_API int {{ func }}_seed(int seed) {
  const int previous = sol_seed_current;
  sol_seed_current = seed;
  {{ impl }}_seed(seed);
  return previous;
}

SOL_API void {{ func }}(void* ctx{% for t in inputs %}, const {{ t.ctype }}* in{{ loop.index0 }}{% endfor %}{% for t in outputs %}, {{ t.ctype }}** out{{ loop.index0 }}{% endfor %}) {
  {{ func }}_init(0);
  sol_check(cudaSetDevice(sol_device), "cudaSetDevice");
  cudaStream_t stream = (cudaStream_t)ctx;
  const void* host_inputs[{{ [inputs|length, 1]|max }}] = { {{ inputs_list }} };
  (void)host_inputs;
{% for t in outputs %}
  *out{{ loop.index0 }} = ({{ t.ctype }}*)sol_ext_malloc({{ t.bytes }});
  if (!*out{{ loop.index0 }}) sol_die("sol_ext_malloc failed for output {{ loop.index0 }}");
{% endfor %}
  struct sol_buffers own;
  const int shared = pthread_mutex_trylock(&sol_buffers_lock) == 0;
  struct sol_buffers* b = shared ? &sol_shared_buffers : &own;
  if (!shared) sol_alloc_buffers(&own);
  for (int i = 0; i < {{ inputs|length }}; ++i)
    sol_check(cudaMemcpyAsync(b->inputs[i], host_inputs[i], sol_input_bytes[i], cudaMemcpyHostToDevice, stream), "copying an input to the GPU");
  if ({{ impl }}_forward(sol_derived, (const void**)b->inputs, (const void**)sol_params, b->outputs, b->workspace, {{ batch }}, stream, SOL_DEPLOY_FP32_MATH) != 0)
    sol_die("launching the model's kernels failed");
{% for t in outputs %}
  sol_check(cudaMemcpyAsync(*out{{ loop.index0 }}, b->outputs[{{ loop.index0 }}], {{ t.bytes }}, cudaMemcpyDeviceToHost, stream), "copying output {{ loop.index0 }} back");
{% endfor %}
  const int status = {{ impl }}_status(stream);  // synchronises the stream: the outputs are complete
  if (shared) pthread_mutex_unlock(&sol_buffers_lock);
  else sol_free_buffers(&own);
  if (status != 0) fprintf(stderr, "{{ lib_name }}: the model reported status %d (an index out of range)\n", status);
}
"""
