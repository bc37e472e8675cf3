"""aten op -> SOL op translation, by family; importing this package fills `HANDLERS`."""

from . import elementwise, indexing, linalg, loss, nn, recurrent, resample, shape, views
from ._registry import HANDLERS, IGNORED, SIZE_OPS, Context, aten

__all__ = ["HANDLERS", "IGNORED", "SIZE_OPS", "Context", "aten", "elementwise", "indexing", "linalg", "loss", "nn", "recurrent", "resample",
           "shape", "views"]
