"""Built-in ops; importing this package registers them all.

Files by family: conv (DNN library calls), elementwise, pooling,
normalization, reduction, shape, attention, misc. Helpers shared by shape
rules live in `_shapes`.
"""

from . import attention, conv, elementwise, indexing, math_extra, misc, normalization, pooling, reduction, reduction_extra, shape
from .elementwise import IDENTITY_OPS

__all__ = ["IDENTITY_OPS", "attention", "conv", "elementwise", "indexing", "math_extra", "misc", "normalization", "pooling",
           "reduction", "reduction_extra", "shape"]
