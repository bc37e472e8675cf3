"""SOL backend for ARM64 CPUs.

Adds the device type ``arm64`` (entry point ``sol.backends: arm64``). It
reuses sol-backend-x86's readers of the host's CPU facts and adds only what
differs on ARM: the CPU naming and the ISA features.
"""

from __future__ import annotations

from .backend import Arm64Backend

__version__ = "0.1.0"

__all__ = ["Arm64Backend", "__version__"]
