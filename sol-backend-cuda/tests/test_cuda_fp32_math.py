"""TF32 as the caller's framework says, per call, without a GPU.

* `sol.precision`'s math word and its per-call context;
* the runtime appends the word of each launch to ``_forward``/``_prepare`` (fake_model.c records it);
* the generated host code hands it to every library call;
* the glue's decisions per math mode, with stand-in cuBLAS/cuBLASLt/cuDNN (fake_dnn_libraries.cu) built by nvcc
  against the wheels' headers: the math type a convolution descriptor is searched and run with, the algorithms a
  strict convolution may take, the compute type of each GEMM and cuBLASLt operation, what is set up again after
  a setting flips (nothing but the other mode's first call) and what autotuning times.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from sol.precision import STRICT, Fp32Math, fp32_math, using_fp32_math
from sol.records import DevicePointer, HostBuffer
from sol_backend_cuda import libraries
from sol_backend_cuda.glue import glue
from sol_backend_cuda.runtime import Cudart, CudaRuntime
from sol_backend_cuda.toolkit import find_nvcc, library_dirs

HERE = Path(__file__).parent
CC = shutil.which("cc") or shutil.which("gcc")
NVCC = find_nvcc("nvcc")
CONV, MATMUL, BOTH = Fp32Math(conv_tf32=True), Fp32Math(matmul_tf32=True), Fp32Math(True, True)


# -- the word and its context -----------------------------------------------------------------------------------------
def test_the_word_has_one_bit_per_switch():
    assert [m.word() for m in (STRICT, CONV, MATMUL, BOTH)] == [0, 1, 2, 3]
    assert all(Fp32Math.from_word(m.word()) == m for m in (STRICT, CONV, MATMUL, BOTH))


def test_the_context_is_per_call_and_a_function_is_asked_when_read():
    assert fp32_math() == STRICT, "no framework: fp32 in fp32"
    asked = []
    settings = {"now": CONV}

    def framework():
        asked.append(1)
        return settings["now"]

    with using_fp32_math(framework):
        assert asked == [], "entering costs no reading of the framework's settings"
        assert fp32_math() == CONV
        settings["now"] = MATMUL  # flipped during the call: the next launch sees it
        assert fp32_math() == MATMUL and len(asked) == 2
        with using_fp32_math(BOTH):
            assert fp32_math() == BOTH
        assert fp32_math() == MATMUL
        seen = []
        other = threading.Thread(target=lambda: seen.append(fp32_math()))
        other.start()
        other.join()
        assert seen == [STRICT], "another thread's calls are not this call's"
    assert fp32_math() == STRICT


# -- the runtime passes the word of each launch -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def fake_model(tmp_path_factory):
    if CC is None:
        pytest.skip("no C compiler to build the stand-ins")
    out = tmp_path_factory.mktemp("fake-math")
    for name in ("fake_libcudart", "fake_model"):
        subprocess.run([CC, "-shared", "-fPIC", "-O1", "-o", str(out / f"{name}.so"), str(HERE / f"{name}.c")],
                       check=True)
    cudart, reason = Cudart.load(str(out / "fake_libcudart.so"))
    assert cudart is not None, reason
    runtime = CudaRuntime(0, cudart)
    return runtime, runtime.load(out / "fake_model.so")


def test_every_launch_carries_the_settings_of_that_moment(fake_model):
    runtime, module = fake_model
    derived, weight = runtime.alloc(4), runtime.alloc(4)
    params = (ctypes.c_uint64 * 1)(weight)
    prepare = runtime.function(module, "sol_m_prepare")
    forward = runtime.function(module, "sol_m_forward")
    table = (ctypes.c_uint64 * 1)(runtime.alloc(64))
    args = [DevicePointer(derived), HostBuffer(table), HostBuffer(params), HostBuffer(table),
            DevicePointer(runtime.alloc(64)), 1]
    seen = module.lib.fake_seen_math
    assert runtime.launch(prepare, [DevicePointer(derived), HostBuffer(params), 1], queue=7).result() == 0
    assert seen() == 0
    settings = {"now": CONV}
    with using_fp32_math(lambda: settings["now"]):
        runtime.launch(prepare, [DevicePointer(derived), HostBuffer(params), 1], queue=7)
        assert seen() == 1
        for now in (BOTH, STRICT, MATMUL):
            settings["now"] = now
            assert runtime.launch(forward, args, queue=7).result() == 0
            assert seen() == now.word() and module.lib.fake_seen_stream() is not None
    runtime.launch(forward, args, queue=7)
    assert seen() == 0, "outside a framework's call: strict fp32"
    np.testing.assert_equal(runtime.launch(runtime.function(module, "sol_m_workspace_size"), [3]).result(), 48)


# -- the glue's decisions per mode, on stand-in libraries -------------------------------------------------------------
needs_nvcc_and_libs = pytest.mark.skipif(NVCC is None or libraries.found() is None,
                                         reason="needs nvcc and the libs extra's headers (sol-backend-cuda[libs])")


class Harness:
    """fake_dnn_libraries.cu on the glue: drive a call, read what the stand-in libraries recorded."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        lib.harness_value.restype = ctypes.c_longlong
        lib.harness_value.argtypes = [ctypes.c_char_p]
        for name in ("harness_conv", "harness_linear", "harness_gemm"):
            getattr(lib, name).restype = ctypes.c_int
        assert lib.harness_init() == 0

    def __getitem__(self, name: str) -> int:
        value = self.lib.harness_value(name.encode())
        assert value != -1 or name == "ran_algo", f"the harness records no {name!r}"
        return int(value)

    def conv(self, kind: int, math: Fp32Math, n: int) -> None:
        assert self.lib.harness_conv(kind, math.word(), ctypes.c_longlong(n)) == 0

    def linear(self, math: Fp32Math, n: int) -> None:
        assert self.lib.harness_linear(math.word(), ctypes.c_longlong(n)) == 0

    def gemm(self, math: Fp32Math, batch: int) -> None:
        assert self.lib.harness_gemm(math.word(), ctypes.c_longlong(batch)) == 0


@pytest.fixture(scope="module", params=[False, True], ids=["heuristics", "autotuned"])
def harness(request, tmp_path_factory):
    if NVCC is None or libraries.found() is None:
        pytest.skip("needs nvcc and the libs extra's headers (sol-backend-cuda[libs])")
    out = tmp_path_factory.mktemp("glue")
    source = out / "glue_harness.cu"
    source.write_text("#include <cuda_runtime.h>\n#include <cstdint>\n" + glue(autotune=request.param)
                      + (HERE / "fake_dnn_libraries.cu").read_text())
    includes = [f"-I{lib.include}" for lib in libraries.found() or ()]
    # -Bsymbolic: the glue calls the stand-ins even where this process has loaded the real libraries already
    command = [NVCC, "-std=c++17", "-shared", "--compiler-options", "-fPIC", "-w", "-Xlinker", "-Bsymbolic",
               *includes, str(source), "-o", str(out / "glue_harness.so"), *(f"-L{d}" for d in library_dirs(NVCC))]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return Harness(ctypes.CDLL(str(out / "glue_harness.so"))), request.param


@needs_nvcc_and_libs
@pytest.mark.parametrize("kind", [0, 1, 2], ids=["forward", "backward_data", "backward_filter"])
def test_a_convolution_searches_and_runs_in_the_call_s_mode(harness, kind):
    h, autotuned = harness
    searches = "finds" if autotuned else "gets"
    fma, tensor_ops = h["CUDNN_FMA_MATH"], h["CUDNN_TENSOR_OP_MATH"]
    descriptors, before = h["conv_descriptors"], h[searches]
    # strict: searched as FMA; the TF32-permitting (DEFAULT_MATH) offer and the one over the workspace are passed over
    h.conv(kind, STRICT, 2)
    assert (h["searched_math"], h["ran_math"], h["ran_algo"], h["ran_workspace"]) == (fma, fma, 0, 0)
    assert h[searches] == before + 1 and h["conv_descriptors"] == descriptors + 1
    # TF32 allowed: a descriptor of its own, searched with tensor ops, run with the math type of the algorithm taken
    h.conv(kind, CONV, 2)
    assert (h["searched_math"], h["ran_math"], h["ran_algo"], h["ran_workspace"]) == (tensor_ops, tensor_ops, 1, 100)
    assert h[searches] == before + 2 and h["conv_descriptors"] == descriptors + 2
    # flipping back costs nothing: each mode keeps its descriptor and algorithm for the batch size
    h.conv(kind, STRICT, 2)
    assert (h["ran_math"], h["ran_algo"]) == (fma, 0) and h[searches] == before + 2
    h.conv(kind, MATMUL, 2)  # the matmul bit does not touch convolutions
    assert (h["ran_math"], h["ran_algo"]) == (fma, 0) and h[searches] == before + 2
    h.conv(kind, BOTH, 2)
    assert (h["ran_math"], h["ran_algo"]) == (tensor_ops, 1) and h[searches] == before + 2
    # a new batch size searches again, in the mode of the call only
    h.conv(kind, CONV, 4)
    assert h["searched_math"] == tensor_ops and h[searches] == before + 3
    h.conv(kind, STRICT, 4)
    assert (h["searched_math"], h["ran_math"], h["ran_algo"]) == (fma, fma, 0) and h[searches] == before + 4
    assert h["conv_descriptors"] == descriptors + 2


@needs_nvcc_and_libs
def test_a_linear_keeps_an_operation_and_algorithms_per_mode(harness):
    h, _ = harness
    strict, tf32 = h["CUBLAS_COMPUTE_32F"], h["CUBLAS_COMPUTE_32F_FAST_TF32"]
    descriptors, heuristics = h["lt_descriptors"], h["heuristics"]
    h.linear(STRICT, 3)
    assert h["lt_compute"] == strict and h["lt_heuristic_compute"] == strict
    h.linear(MATMUL, 3)
    assert h["lt_compute"] == tf32 and h["lt_heuristic_compute"] == tf32
    assert h["lt_descriptors"] == descriptors + 2 and h["heuristics"] == heuristics + 2
    # back and forth: the stand-in's cublasLtMatmul fails for an algorithm chosen for the other compute type
    for math, compute in ((STRICT, strict), (BOTH, tf32), (CONV, strict)):
        h.linear(math, 3)
        assert h["lt_compute"] == compute
    assert h["heuristics"] == heuristics + 2
    h.linear(BOTH, 5)  # a new batch size: new layouts, a heuristic for this mode only, the operations kept
    assert h["lt_compute"] == tf32 and h["heuristics"] == heuristics + 3 and h["lt_descriptors"] == descriptors + 2


@needs_nvcc_and_libs
def test_a_gemm_names_its_compute_type_and_the_handle_allows_no_tf32(harness):
    h, _ = harness
    assert h["handle_math"] == h["CUBLAS_DEFAULT_MATH"]
    h.gemm(STRICT, 1)
    assert (h["gemm_compute"], h["gemm_batched"]) == (h["CUBLAS_COMPUTE_32F"], 0)
    h.gemm(MATMUL, 3)
    assert (h["gemm_compute"], h["gemm_batched"]) == (h["CUBLAS_COMPUTE_32F_FAST_TF32"], 1)
    h.gemm(CONV, 3)
    assert h["gemm_compute"] == h["CUBLAS_COMPUTE_32F"]
