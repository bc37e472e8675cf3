"""ONNX operator handlers: one function per op type, translating a node onto SOL's op registry.

A handler receives the importer (`sol_frontend_onnx.importer.Importer`) as
``ctx`` -- the node's inputs (``ctx.input(i)``), attributes (``ctx.attr``),
the model's opset (``ctx.opset``) -- and returns the node's output tensors
(one Tensor, or a list with None for outputs it cannot produce).
"""

from __future__ import annotations

from . import (  # noqa: F401  (register handlers)
    attention,
    constants,
    einsum,
    elementwise,
    indexing,
    losses,
    nn,
    normalization,
    reduce,
    resize,
    sequence,
    shape,
    training,
)
from ._registry import HANDLERS, handler

__all__ = ["HANDLERS", "handler"]
