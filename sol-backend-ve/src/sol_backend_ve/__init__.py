"""SOL backend for NEC SX-Aurora TSUBASA Vector Engines (VE).

Adds the device type ``ve`` (entry point ``sol.backends: ve``). Devices are
found the way NEC's VEDA finds them: the ``/dev/veslot*`` files name the VEs,
``/sys/class/ve/ve<N>/`` describes them, ``VEDA_VISIBLE_DEVICES`` selects
and orders them.
"""

from __future__ import annotations

import sys

from .backend import VeBackend

__version__ = "0.1.0"

if "torch" in sys.modules:  # PyTorch's VE device (torch.ve); never imports torch itself
    from .torch_ve import register as _register_torch

    _register_torch()

__all__ = ["VeBackend", "__version__"]
