"""Runtime: loading built artifacts (ctypes) and calling them on the framework's tensors; device contexts and
transparent offloading for devices with their own memory (`offload`)."""

from .compiled import CompiledModel, TensorSpec
from .library import ModelLibrary
from .offload import OffloadedModel, TransferStats

__all__ = ["CompiledModel", "ModelLibrary", "OffloadedModel", "TensorSpec", "TransferStats"]
