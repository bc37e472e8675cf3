"""Built-in flavours of the loop-nest model."""

from .cpu import CpuFlavour

__all__ = ["CpuFlavour"]
