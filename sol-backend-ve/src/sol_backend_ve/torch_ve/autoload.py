"""PyTorch's backend autoload entry point (``torch.backends: sol_ve``), called from inside ``import torch``.

It must stay cheap and never fail PyTorch's import: it installs the Python side of the VE device (``torch.ve``,
``Tensor.ve()``, ``Module.ve()``, torch.save/load of VE tensors) and nothing else. No build, no VEDA, no ``import
sol``: the C++ extension loads at the first use of the VE (`sol_backend_ve.torch_ve.register` with ``lazy``).
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns PyTorch's autoload off.
"""

from __future__ import annotations

import warnings


def autoload() -> None:
    """Register torch.ve lazily; any failure is one warning (PyTorch would turn an exception into a failed import)."""
    try:
        from . import register

        register(lazy=True)
    except Exception as exc:  # noqa: BLE001 - import torch must keep working
        warnings.warn(f"SOL's PyTorch VE device could not be registered: {exc}", stacklevel=2)
