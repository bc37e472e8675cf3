"""sol.deploy(..., device="cuda") without a GPU: the GCC-style command translated for nvcc, and a real model deployed
as a shared library whose fat binary holds machine code for every compute capability asked for (read by cuobjdump).
"""

from __future__ import annotations

import subprocess

import pytest
import sol
from sol.errors import SolInputError, SolUnsupportedError
from sol.precision import Fp32Math
from sol_backend_cuda import deploy_driver
from sol_backend_cuda.deploy import TF32_OPTION, WRAPPER, CudaDeployTarget, _cc_option, tf32_option
from sol_backend_cuda.toolkit import cubin_architectures, find_cuobjdump, find_nvcc

NVCC = find_nvcc("nvcc")
CUOBJDUMP = find_cuobjdump(NVCC)


def test_compiling_goes_to_nvcc_with_host_flags_through_xcompiler():
    command = deploy_driver.translate(["--sol-nvcc=/opt/nvcc", "--sol-cc=80,90", "-O3", "-fPIC", "-fvisibility=hidden",
                                       "-std=c++17", "-Iinc", "-c", "lib.cpp", "-o", "lib.o"])
    assert command[:3] == ["/opt/nvcc", "-x", "cu"]  # the deploy driver names the source .cpp: it is CUDA
    assert command[command.index("-Xcompiler") + 1] == "-fPIC,-fvisibility=hidden"
    assert "arch=compute_80,code=sm_80" in command and "arch=compute_90,code=sm_90" in command
    assert command[-5:] == ["-Iinc", "-c", "lib.cpp", "-o", "lib.o"]
    assert "-shared" not in command


def test_linking_a_shared_library_adds_the_static_cuda_runtime(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libcudart_static.a").write_bytes(b"!<arch>\n")
    nvcc = tmp_path / "bin" / "nvcc"
    command = deploy_driver.translate([f"--sol-nvcc={nvcc}", "-O3", "-shared", "a.o", "-o", "lib.so"])
    assert command[0].endswith("g++") and command[1:5] == ["-O3", "-shared", "a.o", "-o"]
    assert f"-L{tmp_path / 'lib'}" in command and command[-4:] == list(deploy_driver.CUDART_STATIC)


def test_options_and_kinds():
    assert _cc_option({"nvidia::cc": "80,90", "cuda::cc": ""}) == "80,90"
    assert _cc_option({"nvidia::cc": "", "cuda::cc": "90"}) == "90"
    assert _cc_option({"nvidia::cc": "", "cuda::cc": ""}) is None
    with pytest.raises(SolInputError, match="nvidia::cc"):
        _cc_option({"nvidia::cc": "80", "cuda::cc": "90"})
    assert CudaDeployTarget.ccs({"nvidia::cc": "sm_90, 8.0"}) == ["80", "90"]
    with pytest.raises(SolUnsupportedError, match="lib::shared"):
        CudaDeployTarget().check_kind("static", {})


def test_the_tf32_option_is_strict_by_default_and_refused_without_library_calls():
    """A deployed library has no framework whose settings it could follow: nvidia::tf32 says, 'off' by default. Its
    word is what the wrapper passes at every call; TF32 is refused while deployed libraries make no library calls."""
    assert CudaDeployTarget.options[TF32_OPTION] == "off"
    assert tf32_option({}) == Fp32Math() and tf32_option({TF32_OPTION: " Conv "}) == Fp32Math(conv_tf32=True)
    assert tf32_option({TF32_OPTION: "all"}).word() == 3
    with pytest.raises(SolInputError, match="nvidia::tf32='yes' is not one of"):
        tf32_option({TF32_OPTION: "yes"})
    assert WRAPPER.read_text().count(", SOL_DEPLOY_FP32_MATH) != 0)") == 2  # _prepare and _forward
    if NVCC is not None:
        assert CudaDeployTarget().flavour({TF32_OPTION: "off"}).deploy_fp32_math.word() == 0
        with pytest.raises(SolUnsupportedError, match="generated kernels only"):
            CudaDeployTarget().flavour({TF32_OPTION: "matmul"})


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason='nvcc and cuobjdump are not installed: pip install '
                    '"sol-backend-cuda[toolchain]" (the test command of noxfile.py does)')
def test_deployed_library_is_a_fat_binary_with_sm90(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("sol_frontend_torch")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5)).eval()
    result = sol.deploy(model, [2, 3, 16, 16], device="cuda", path=tmp_path, options={"nvidia::cc": "80,90"})
    assert result.library.name == "libsolpredict.so" and result.header.exists()
    assert set(result.symbols) == {"sol_predict", "sol_predict_init", "sol_predict_seed", "sol_ext_malloc",
                                   "sol_ext_free"}
    # CUDA's runtime is linked statically: nothing of CUDA is needed at run time but the driver
    assert not [lib for lib in result.runtime_libraries if "cuda" in lib]
    assert cubin_architectures(CUOBJDUMP, result.library) == ["sm_80", "sm_90"]
    header = result.header.read_text()
    assert "void sol_predict(void* ctx, const float* in0, float** out0)" in header
    assert "--sol-cc=80,90" in header
    # the model's kernels are in the cubins (forward's clusters: sol_predict_model_forward_c<index>...)
    done = subprocess.run([CUOBJDUMP, "-elf", str(result.library)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "sol_predict_model_forward_c" in done.stdout
