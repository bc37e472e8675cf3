"""The few CUDA driver API calls SOL's device probe needs, through ctypes.

Why not torch or cuda-python: importing a framework to count GPUs costs
seconds and gigabytes, and the probe must work where only the NVIDIA driver
is installed. The driver applies CUDA_VISIBLE_DEVICES itself, so the devices
seen here are exactly the ones a CUDA program of this process would see.
"""

from __future__ import annotations

import ctypes
from typing import Any

LIBRARY = "libcuda.so.1"

CUDA_SUCCESS = 0
# CUdevice_attribute values (cuda.h)
ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

_INT_P = ctypes.POINTER(ctypes.c_int)
_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [ctypes.c_uint],
    "cuDriverGetVersion": [_INT_P],
    "cuDeviceGetCount": [_INT_P],
    "cuDeviceGet": [_INT_P, ctypes.c_int],
    "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuDeviceTotalMem_v2": [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int],
    "cuDeviceGetAttribute": [_INT_P, ctypes.c_int, ctypes.c_int],
    "cuDeviceGetPCIBusId": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}


class CudaError(Exception):
    """A driver call returned an error; the message names the call and the CUDA error."""

    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} failed: {name} ({code})")
        self.call, self.code, self.name = call, code, name


class CudaDriver:
    """A loaded ``libcuda`` with typed wrappers that raise `CudaError`."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        for name, argtypes in _SIGNATURES.items():
            function = getattr(lib, name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int

    @classmethod
    def load(cls, library: str = LIBRARY) -> CudaDriver | None:
        """The driver library, or None when this machine has no NVIDIA driver."""
        try:
            return cls(ctypes.CDLL(library))
        except OSError:
            return None

    def error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        if self._lib.cuGetErrorName(code, ctypes.byref(name)) != CUDA_SUCCESS or not name.value:
            return "unknown CUDA error"
        return name.value.decode("ascii", "replace")

    def _check(self, call: str, result: int) -> None:
        if result != CUDA_SUCCESS:
            raise CudaError(call, result, self.error_name(result))

    def driver_version(self) -> str:
        """The CUDA version the driver supports, e.g. "13.0" (needs no cuInit)."""
        version = ctypes.c_int()
        self._check("cuDriverGetVersion", self._lib.cuDriverGetVersion(ctypes.byref(version)))
        return f"{version.value // 1000}.{version.value % 1000 // 10}"

    def init(self) -> None:
        self._check("cuInit", self._lib.cuInit(0))

    def device_count(self) -> int:
        count = ctypes.c_int()
        self._check("cuDeviceGetCount", self._lib.cuDeviceGetCount(ctypes.byref(count)))
        return count.value

    def device(self, ordinal: int) -> int:
        handle = ctypes.c_int()
        self._check("cuDeviceGet", self._lib.cuDeviceGet(ctypes.byref(handle), ordinal))
        return handle.value

    def name(self, device: int) -> str:
        buffer = ctypes.create_string_buffer(256)
        self._check("cuDeviceGetName", self._lib.cuDeviceGetName(buffer, len(buffer), device))
        return buffer.value.decode("utf-8", "replace")

    def total_memory(self, device: int) -> int:
        nbytes = ctypes.c_size_t()
        self._check("cuDeviceTotalMem", self._lib.cuDeviceTotalMem_v2(ctypes.byref(nbytes), device))
        return nbytes.value

    def attribute(self, attribute: int, device: int) -> int:
        value = ctypes.c_int()
        self._check("cuDeviceGetAttribute", self._lib.cuDeviceGetAttribute(ctypes.byref(value), attribute, device))
        return value.value

    def pci_bus_id(self, device: int) -> str:
        buffer = ctypes.create_string_buffer(32)  # "dddd:bb:dd.f" plus room
        self._check("cuDeviceGetPCIBusId", self._lib.cuDeviceGetPCIBusId(buffer, len(buffer), device))
        return buffer.value.decode("ascii", "replace")
