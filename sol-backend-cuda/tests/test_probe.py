"""The probe logic against a driver written in Python (every error path, no GPU needed)."""

from __future__ import annotations

from sol_backend_cuda.driver import CudaError
from sol_backend_cuda.probe import probe_driver


class FakeDriver:
    def __init__(self, gpus: list[dict], init_error: CudaError | None = None) -> None:
        self.gpus, self.init_error = gpus, init_error

    def init(self) -> None:
        if self.init_error:
            raise self.init_error

    def device_count(self) -> int:
        return len(self.gpus)

    def device(self, ordinal: int) -> int:
        return 100 + ordinal  # handles need not equal ordinals

    def name(self, device: int) -> str:
        return self.gpus[device - 100]["name"]

    def total_memory(self, device: int) -> int:
        return self.gpus[device - 100]["memory"]

    def attribute(self, attribute: int, device: int) -> int:
        gpu = self.gpus[device - 100]
        if "broken" in gpu:
            raise CudaError("cuDeviceGetAttribute", 101, "CUDA_ERROR_INVALID_DEVICE")
        return {16: gpu["sms"], 75: gpu["cc"][0], 76: gpu["cc"][1]}[attribute]

    def pci_bus_id(self, device: int) -> str:
        return f"00000000:{device:02X}:00.0"


H200 = {"name": "NVIDIA H200", "memory": 150_000_000_000, "sms": 132, "cc": (9, 0)}
L4 = {"name": "NVIDIA L4", "memory": 24_000_000_000, "sms": 58, "cc": (8, 9)}


def test_devices_in_driver_order():
    result = probe_driver(FakeDriver([H200, L4]))
    assert [d.id for d in result.devices] == ["cuda:0", "cuda:1"]
    assert result.devices[1].name == "NVIDIA L4"
    assert result.devices[1].properties == {
        "memory_bytes": 24_000_000_000,
        "compute_capability": "8.9",
        "multiprocessors": 58,
        "pci_bus_id": "00000000:65:00.0",
    }


def test_no_driver():
    assert probe_driver(None).reason == "no NVIDIA driver (libcuda.so.1 not found)"


def test_init_error_names_the_cuda_error(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    error = CudaError("cuInit", 999, "CUDA_ERROR_UNKNOWN")
    assert probe_driver(FakeDriver([], error)).reason == "cuInit failed: CUDA_ERROR_UNKNOWN (999)"


def test_hidden_devices_mention_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    error = CudaError("cuInit", 100, "CUDA_ERROR_NO_DEVICE")
    result = probe_driver(FakeDriver([], error))
    assert result.reason == "cuInit failed: CUDA_ERROR_NO_DEVICE (100) (CUDA_VISIBLE_DEVICES='')"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert probe_driver(FakeDriver([])).reason == "the NVIDIA driver reports no GPU"


def test_error_on_one_device_becomes_the_reason():
    result = probe_driver(FakeDriver([H200, {**L4, "broken": True}]))
    assert result.devices == ()
    assert result.reason.startswith("cuDeviceGetAttribute failed: CUDA_ERROR_INVALID_DEVICE (101)")
