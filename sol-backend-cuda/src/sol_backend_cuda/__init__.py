"""SOL backend for NVIDIA GPUs.

Adds the device type ``cuda`` (entry point ``sol.backends: cuda``). Devices
are found through the CUDA driver API (``libcuda.so.1``) with ctypes, in a
child process, so neither a framework import nor a hanging driver can slow
down or take down the user's process.
"""

from __future__ import annotations

from .backend import CudaBackend

__version__ = "0.1.0"

__all__ = ["CudaBackend", "__version__"]
