"""SOL backend for NEC SX-Aurora TSUBASA Vector Engines (VE).

Adds the device type ``ve`` (entry point ``sol.backends: ve``). Devices are
found the way NEC's VEDA finds them: the ``/dev/veslot*`` files name the VEs,
``/sys/class/ve/ve<N>/`` describes them, ``VEDA_VISIBLE_DEVICES`` selects
and orders them.
"""

from __future__ import annotations

import sys
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # imported on use: PyTorch's autoload imports this package inside import torch, and must stay cheap
    if name == "VeBackend":
        from .backend import VeBackend

        return VeBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if "torch" in sys.modules:  # PyTorch's VE device (torch.ve, started at its first use); never imports torch itself
    from .torch_ve import register_if_torch_imported as _register_torch

    _register_torch()

__all__ = ["VeBackend", "__version__"]
