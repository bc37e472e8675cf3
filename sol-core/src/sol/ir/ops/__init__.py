"""Built-in ops; importing this package registers them all.

Files by family: conv (DNN library calls), elementwise, pooling,
normalization, reduction, shape, attention, misc; the training ops
(batch_norm_train, conv_grad, dropout_train, loss, pool_grad) and the
gradient rules of the others (grad_*). Helpers shared by shape rules live
in `_shapes`, by gradient rules in `_grad`.
"""

from . import (
    attention,
    batch_norm_train,
    conv,
    conv_grad,
    dropout_train,
    elementwise,
    grad_dense,
    grad_elementwise,
    grad_norm,
    grad_pool,
    grad_reduction,
    grad_shape,
    indexing,
    loss,
    math_extra,
    misc,
    normalization,
    pool_grad,
    pool_indices,
    pooling,
    recurrent,
    reduction,
    reduction_extra,
    scatter,
    selection,
    shape,
)
from ._shapes import broadcast, product, spatial_out  # shape helpers frontends use too
from .elementwise import IDENTITY_OPS

__all__ = ["IDENTITY_OPS", "broadcast", "product", "spatial_out", "attention", "batch_norm_train", "conv", "conv_grad", "dropout_train", "elementwise", "grad_dense",
           "grad_elementwise", "grad_norm", "grad_pool", "grad_reduction", "grad_shape", "indexing", "loss", "math_extra",
           "misc", "normalization", "pool_grad", "pool_indices", "pooling", "recurrent", "reduction", "reduction_extra", "scatter",
           "selection", "shape"]
