"""Turning what the CUDA driver reports into SOL devices."""

from __future__ import annotations

import os
from typing import Protocol

from sol.records import Device, ProbeResult

from .driver import (
    ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
    ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
    ATTRIBUTE_MULTIPROCESSOR_COUNT,
    CudaError,
)

NO_DRIVER = "no NVIDIA driver (libcuda.so.1 not found)"


class DriverApi(Protocol):
    """What the probe needs of a driver (`CudaDriver`, or a fake in tests)."""

    def init(self) -> None: ...
    def device_count(self) -> int: ...
    def device(self, ordinal: int) -> int: ...
    def name(self, device: int) -> str: ...
    def total_memory(self, device: int) -> int: ...
    def attribute(self, attribute: int, device: int) -> int: ...
    def pci_bus_id(self, device: int) -> str: ...


def probe_driver(driver: DriverApi | None) -> ProbeResult:
    """The CUDA devices ``driver`` sees, in its order (``cuda:N`` is CUDA ordinal N)."""
    if driver is None:
        return ProbeResult(reason=NO_DRIVER)
    try:
        driver.init()
        devices = tuple(_device(driver, ordinal) for ordinal in range(driver.device_count()))
    except CudaError as exc:
        return ProbeResult(reason=f"{exc}{_visible_hint()}")
    if not devices:
        return ProbeResult(reason=f"the NVIDIA driver reports no GPU{_visible_hint()}")
    return ProbeResult(devices=devices)


def _device(driver: DriverApi, ordinal: int) -> Device:
    handle = driver.device(ordinal)
    major = driver.attribute(ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle)
    minor = driver.attribute(ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle)
    properties = {
        "memory_bytes": driver.total_memory(handle),
        "compute_capability": f"{major}.{minor}",
        "multiprocessors": driver.attribute(ATTRIBUTE_MULTIPROCESSOR_COUNT, handle),
        "pci_bus_id": driver.pci_bus_id(handle),
    }
    return Device("cuda", ordinal, driver.name(handle), "cuda", properties)


def _visible_hint() -> str:
    # An empty or mistyped CUDA_VISIBLE_DEVICES is the usual reason for "no device".
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "" if visible is None else f" (CUDA_VISIBLE_DEVICES={visible!r})"
