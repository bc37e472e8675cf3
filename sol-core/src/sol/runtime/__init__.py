"""Runtime: loading built artifacts (ctypes) and calling them on the framework's tensors."""

from .compiled import CompiledModel, TensorSpec
from .library import ModelLibrary

__all__ = ["CompiledModel", "ModelLibrary", "TensorSpec"]
