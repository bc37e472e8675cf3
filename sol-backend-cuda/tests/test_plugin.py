"""The installed distribution is found through its entry point and works through sol's API."""

from __future__ import annotations

import sol
from sol.devices import dump
from sol.plugins import registry
from sol_backend_cuda import CudaBackend
from sol_backend_cuda.driver import CudaDriver


def test_entry_point_is_discovered_and_ok():
    assert "cuda" in registry().backends
    (info,) = [p for p in sol.plugins() if p.kind == "backend" and p.name == "cuda"]
    assert info.status == "ok", info.error
    assert info.distribution == "sol-backend-cuda"


def test_probe_runs_out_of_process_and_is_constructible_there():
    assert CudaBackend.probe_timeout == 10.0
    assert type(registry().backends["cuda"])().name == "cuda"


def test_config_key_is_declared():
    assert sol.config["cuda::nvcc"] == "nvcc"


def test_device_dump_shows_cuda():
    text = dump()
    assert "cuda: " in text
    if CudaDriver.load() is None:
        assert "no devices: no NVIDIA driver (libcuda.so.1 not found)" in text
