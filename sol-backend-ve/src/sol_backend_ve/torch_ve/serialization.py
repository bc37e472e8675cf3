"""torch.save / torch.load of VE tensors: PyTorch's storage location registry learns the ``ve`` device.

Saving tags a VE storage ``"ve:N"`` (PyTorch copies its bytes to the CPU to write them). Loading without
``map_location`` puts it back on ve:N; ``map_location="cpu"`` (or a function, or a dict) works as for CUDA, and
``map_location="ve"``/``"ve:N"`` moves CPU-saved tensors onto the VE. Installed by `sol_backend_ve.torch_ve.register`
even where no VE can be used, so a file holding VE tensors loads with a clear error naming the ``map_location``
workaround instead of PyTorch's "don't know how to restore data location".
"""

from __future__ import annotations

from typing import Any

#: before PyTorch's own entries (10: cpu, 20: cuda, ...) would not matter: ours answer only for "ve" locations
PRIORITY = 15


def _tag(storage: Any) -> str | None:
    if storage.device.type == "ve":
        return f"ve:{storage.device.index or 0}"
    return None


def _index(location: str) -> int:
    import torch

    if location == "ve":
        return torch.ve.current_device()
    try:
        return int(location.split(":", 1)[1])
    except (IndexError, ValueError):
        raise RuntimeError(f"cannot restore a tensor to {location!r}: expected 've' or 've:N'") from None


def _restore(storage: Any, location: str) -> Any:
    if not location.startswith("ve"):
        return None
    import torch

    from . import reason

    if not torch.ve.is_available():
        raise RuntimeError(f"this file holds tensors saved on {location}, but the VE cannot be used from PyTorch here "
                           f"({reason() or 'no VE'}): load it with torch.load(..., map_location='cpu')")
    index = _index(location)
    if index >= torch.ve.device_count():
        raise RuntimeError(f"cannot restore a tensor to ve:{index}: this machine has {torch.ve.device_count()} VE(s); "
                           "pass map_location='ve:0' or 'cpu' to torch.load")
    if storage.device.type == "ve" and (storage.device.index or 0) == index:
        return storage
    target = torch.empty(storage.nbytes(), dtype=torch.uint8, device=f"ve:{index}").untyped_storage()
    target.copy_(storage)
    return target


def install() -> None:
    """Register the VE's tagger and deserializer with torch.serialization (once)."""
    import torch.serialization

    if any(entry[1] is _tag for entry in torch.serialization._package_registry):
        return
    torch.serialization.register_package(PRIORITY, _tag, _restore)
