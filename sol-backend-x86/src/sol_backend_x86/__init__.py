"""SOL backend for x86-64 host CPUs.

Installing this package adds the device type ``x86`` to SOL (entry point
``sol.backends: x86``). The modules that read the host's CPU facts
(`cpuinfo`, `host`) and run toolchains (`tools`) are shared with
sol-backend-arm64, which builds on this package.
"""

from __future__ import annotations

from .backend import X86Backend

__version__ = "0.1.0"

__all__ = ["X86Backend", "__version__"]
