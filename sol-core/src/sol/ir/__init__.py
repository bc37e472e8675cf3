"""SOL's IR: Graph / Layer / Tensor / Dim and the op registry."""

from .graph import (
    BATCH,
    DTYPES,
    Dim,
    Graph,
    Layer,
    Purpose,
    Size,
    Tensor,
    TensorType,
    as_size,
    evaluate,
    is_static,
    solve_batch,
)
from .registry import OpDef, all_ops, get_op, gradient, op

__all__ = [
    "BATCH", "DTYPES", "Dim", "Graph", "Layer", "OpDef", "Purpose", "Size", "Tensor", "TensorType",
    "all_ops", "as_size", "evaluate", "get_op", "gradient", "is_static", "op", "solve_batch",
]
