"""SOL backend for NEC SX-Aurora TSUBASA Vector Engines (VE).

Adds the device type ``ve`` (entry point ``sol.backends: ve``). Devices are
found the way NEC's VEDA finds them: the ``/dev/veslot*`` files name the VEs,
``/sys/class/ve/ve<N>/`` describes them, ``VEDA_VISIBLE_DEVICES`` selects
and orders them.
"""

from __future__ import annotations

from .backend import VeBackend

__version__ = "0.1.0"

__all__ = ["VeBackend", "__version__"]
