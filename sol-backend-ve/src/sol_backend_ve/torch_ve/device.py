"""``torch.ve``: the VE's counterpart of ``torch.cuda`` (installed by `sol_backend_ve.torch_ve.register`)."""

from __future__ import annotations

from typing import Any

__all__ = ["current_device", "device", "device_count", "device_of", "init", "is_available", "memory_allocated",
           "set_device", "synchronize"]


def _ext() -> Any:
    from . import extension, reason

    module = extension()
    if module is None:
        raise RuntimeError(f"the VE cannot be used from PyTorch: {reason()}")
    return module


def _index(dev: Any) -> int:
    import torch

    if dev is None:
        return -1
    if isinstance(dev, int):
        return dev
    dev = torch.device(dev)
    if dev.type != "ve":
        raise ValueError(f"expected a VE device, got {dev}")
    return -1 if dev.index is None else dev.index


def init() -> None:
    """Start the VE device now (it starts at its first use otherwise); raises with the reason if it cannot."""
    _ext()


def is_available() -> bool:
    """Whether a VE can hold PyTorch tensors in this process (never raises)."""
    from . import extension

    return extension() is not None and extension().device_count() > 0


def device_count() -> int:
    from . import extension

    return extension().device_count() if extension() is not None else 0


def current_device() -> int:
    return int(_ext().current_device())


def set_device(dev: Any) -> None:
    _ext().set_device(_index(dev))


def synchronize(dev: Any = None) -> None:
    """Wait for everything queued on the VE."""
    _ext().synchronize(_index(dev))


def memory_allocated(dev: Any = None) -> int:
    """Bytes of VE memory that PyTorch tensors hold on ``dev`` (default: the current VE)."""
    return int(_ext().memory_allocated(_index(dev)))


class device:
    """Context manager that makes ``dev`` the current VE (``None`` or a negative index: no change)."""

    def __init__(self, dev: Any) -> None:
        self.index = _index(dev)
        self.previous = -1

    def __enter__(self) -> device:
        if self.index >= 0:
            self.previous = current_device()
            set_device(self.index)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.index >= 0:
            set_device(self.previous)


class device_of(device):
    """Context manager that makes the VE of ``tensor`` current (no change for a tensor elsewhere)."""

    def __init__(self, tensor: Any) -> None:
        super().__init__(tensor.device if tensor.device.type == "ve" else None)


def _is_in_bad_fork() -> bool:
    return False


def manual_seed_all(seed: int) -> None:
    """VE ops use the CPU's generator (fallback ops run there)."""
