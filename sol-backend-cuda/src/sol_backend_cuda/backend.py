"""The cuda backend record."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from sol.records import Backend, Device, ProbeResult

from .driver import CudaDriver, CudaError
from .probe import probe_driver
from .toolkit import configured_nvcc, find_nvcc, nvcc_version

if TYPE_CHECKING:
    from .flavour import CudaFlavour
    from .runtime import CudaRuntime


class CudaBackend(Backend):
    name = "cuda"
    description = "NVIDIA GPUs (CUDA driver API, nvcc)"
    framework_devices: ClassVar[Mapping[str, str]] = {"pytorch": "cuda"}  # PyTorch's CUDA tensors
    # cuInit can hang on a wedged GPU or crash on a broken driver install:
    # sol-core runs probe() in a child process and gives up after this long.
    probe_timeout = 10.0

    def probe(self) -> ProbeResult:
        return probe_driver(CudaDriver.load())

    def flavour(self) -> CudaFlavour:
        """The CUDA flavour (imports the code generator: only when compiling)."""
        from .flavour import CudaFlavour

        return CudaFlavour()

    def framework_glue(self, frontend: str) -> Any:
        """PyTorch's current stream and caching allocator for models run on its CUDA tensors (`torch_glue`)."""
        if frontend != "pytorch":
            return None
        from . import torch_glue  # imports torch: only a PyTorch process asks

        return torch_glue

    def runtime(self, device: Device) -> CudaRuntime:
        """The GPU's `sol_backend_cuda.runtime.CudaRuntime` (libcudart through ctypes; the main loop on the host)."""
        from .runtime import open_runtime

        return open_runtime(device.index)

    def versions(self) -> Mapping[str, str]:
        from .libraries import versions as library_versions  # ctypes only: cublasLtGetVersion, cudnnGetVersion

        return {"nvcc": nvcc_version(find_nvcc(configured_nvcc())), "driver": _driver_version(),
                "runtime": _runtime_version(), **library_versions()}


def _runtime_version() -> str:
    # cudaRuntimeGetVersion creates no context: safe in the user's process
    from .runtime import Cudart

    cudart, reason = Cudart.load()
    return cudart.version() + f" ({cudart.path})" if cudart is not None else f"not installed ({reason})"


def _driver_version() -> str:
    # cuDriverGetVersion needs no cuInit, so asking it in the user's process is safe.
    driver = CudaDriver.load()
    if driver is None:
        return "not installed (libcuda.so.1 not found)"
    try:
        return driver.driver_version()
    except CudaError as exc:
        return f"error: {exc}"
