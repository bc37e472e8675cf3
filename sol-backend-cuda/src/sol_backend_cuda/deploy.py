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
from pathlib import Path
from typing import Any, ClassVar

from sol.errors import SolBuildError, SolInputError, SolUnsupportedError
from sol.precision import Fp32Math
from sol.records import DeployLibraries, DeployTarget

from .toolkit import MISSING, configured_nvcc, find_nvcc

#: the library's template (package data): sol-core's deploy_library.j2 with CUDA's blocks
WRAPPER = Path(__file__).with_name("native") / "deploy_library.cu.j2"
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

    return environment().from_string(WRAPPER.read_text()).render(**context)

