"""The ctypes layer against a stand-in libcuda.so.1 with the driver's ABI, and the real one if present."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from sol_backend_cuda.driver import CudaDriver, CudaError
from sol_backend_cuda.probe import probe_driver


def test_missing_library_means_no_driver(tmp_path):
    assert CudaDriver.load(str(tmp_path / "libcuda.so.1")) is None


def test_probe_through_ctypes(fake_libcuda_dir, monkeypatch):
    monkeypatch.delenv("FAKE_CUDA_INIT_ERROR", raising=False)
    driver = CudaDriver.load(str(fake_libcuda_dir / "libcuda.so.1"))
    assert driver is not None
    assert driver.driver_version() == "13.0"
    result = probe_driver(driver)
    assert [d.name for d in result.devices] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]
    assert result.devices[0].properties == {
        "memory_bytes": 85017624576,
        "compute_capability": "9.0",
        "multiprocessors": 132,
        "pci_bus_id": "00000000:18:00.0",
    }
    assert result.devices[1].properties["compute_capability"] == "8.0"


def test_driver_errors_carry_the_cuda_error_name(fake_libcuda_dir):
    driver = CudaDriver.load(str(fake_libcuda_dir / "libcuda.so.1"))
    with pytest.raises(CudaError, match=r"^cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE \(101\)$"):
        driver.device(7)
    assert driver.error_name(12345) == "unknown CUDA error"


def run_sol_devices(env: dict[str, str]) -> dict:
    """sol's own device listing in a fresh process (probe and all, out of process)."""
    code = (
        "import json, sol\n"
        "from sol.devices import dump\n"
        "print(json.dumps({'cuda': [d.to_dict() for d in sol.device.cuda.devices()], 'dump': dump()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=120
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sol_devices_with_the_stand_in_driver(fake_libcuda_dir):
    # dlopen("libcuda.so.1") honours LD_LIBRARY_PATH, so a fresh process sees the stand-in.
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_libcuda_dir), "FAKE_CUDA_INIT_ERROR": "0"}
    out = run_sol_devices(env)
    assert [d["name"] for d in out["cuda"]] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]
    assert "[cuda:0] NVIDIA H100 80GB HBM3, 79.2 GiB, cc 9.0" in out["dump"]


def test_sol_devices_reports_cuinit_errors(fake_libcuda_dir):
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_libcuda_dir), "FAKE_CUDA_INIT_ERROR": "100"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    out = run_sol_devices(env)
    assert out["cuda"] == []
    assert "no devices: cuInit failed: CUDA_ERROR_NO_DEVICE (100)" in out["dump"]


@pytest.mark.skipif(CudaDriver.load() is None, reason="no NVIDIA driver (libcuda.so.1 not found) on this machine")
def test_real_driver():
    result = probe_driver(CudaDriver.load())
    for device in result.devices:
        assert re.fullmatch(r"\d+\.\d+", device.properties["compute_capability"])
        assert device.properties["memory_bytes"] > 0 and device.properties["multiprocessors"] > 0
    assert result.devices or result.reason
