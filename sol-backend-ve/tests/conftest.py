from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from sol_backend_ve import toolchain

# What the VE driver publishes for a Type 20B card (8 cores, 48 GiB HBM2).
TYPE_20B = {
    "model": "2",
    "type": "1",
    "cores_enable": "0xff",
    "num_of_core": "8",
    "memory_size": "48",
    "os_state": "0",
    "ve_state": "1",
    "clock_chip": "1600",
    "clock_base": "1400",
    "clock_memory": "1600",
    "cache_l1d": "32",
    "cache_l1i": "32",
    "cache_l2": "256",
    "cache_llc": "16384",
    "abi_version": "101",
    "fw_version": "5399",
    "partitioning_mode": "0",
}
# A first-generation Type 10B (1408 MHz, 48 GiB) that VEOS has not brought online.
TYPE_10B_OFFLINE = {
    "model": "1",
    "type": "1",
    "cores_enable": "ff",
    "memory_size": "48",
    "os_state": "1",
    "clock_chip": "1408",
    "clock_memory": "1200",
}


@pytest.fixture
def type_20b() -> dict[str, str]:
    return dict(TYPE_20B)


@pytest.fixture
def type_10b_offline() -> dict[str, str]:
    return dict(TYPE_10B_OFFLINE)


VeTree = Callable[[Mapping[int, tuple[int, Mapping[str, str]]]], tuple[Path, Path]]


@pytest.fixture
def ve_tree(tmp_path) -> VeTree:
    """Build a fake /dev and /sys/class/ve: {slot: (driver node, sysfs attributes)}."""

    def build(ves: Mapping[int, tuple[int, Mapping[str, str]]]) -> tuple[Path, Path]:
        dev, sysfs = tmp_path / "dev", tmp_path / "sys" / "class" / "ve"
        dev.mkdir(parents=True, exist_ok=True)
        sysfs.mkdir(parents=True, exist_ok=True)
        for slot, (node, attrs) in ves.items():
            (dev / f"ve{node}").write_text("")  # stands in for the character device
            os.symlink(f"ve{node}", dev / f"veslot{slot}")  # as the driver's udev rule makes it
            (sysfs / f"ve{node}").mkdir()
            for name, value in attrs.items():
                (sysfs / f"ve{node}" / name).write_text(value + "\n")
        return dev, sysfs

    return build


@pytest.fixture(autouse=True)
def _fresh_version_cache():
    toolchain._version.cache_clear()
    yield
    toolchain._version.cache_clear()


def _forget_devices() -> None:
    """Probe results and opened runtimes are cached per process: earlier tests may have probed without the emulator."""
    from sol.devices import forget
    from sol.runtime.offload import forget_runtimes

    forget_runtimes()
    forget()


@pytest.fixture(scope="module")
def torch_ve_device():
    """PyTorch's VE device on the emulated VE, for a whole test module (``torch.device('ve:0')``)."""
    torch = pytest.importorskip("torch")
    import sol_backend_ve.torch_ve as torch_ve

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SOL_VE_EMULATE", "1")
        _forget_devices()
        assert torch_ve.register(), torch_ve.reason()
        assert torch.ve.is_available()
        yield torch.device("ve:0")
    _forget_devices()
