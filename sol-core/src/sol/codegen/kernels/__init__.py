"""Kernel emitters per op; importing this package registers them all."""

from __future__ import annotations

from ...ir import Layer
from ..nest import Node
from . import (  # noqa: F401  (register kernels)
    attention,
    batch_norm_train,
    conv_grad,
    conv_pool,
    dense,
    dropout_train,
    elementwise,
    indexing,
    loss,
    math_extra,
    movement,
    pool,
    pool_grad,
    recurrent,
    reduce,
    scatter,
)
from .base import EXPRESSIONS, KERNELS, KernelContext
from .conv_pool import POOL_OPS as FUSED_POOL_OPS
from .conv_pool import fusable as fusable_pool
from .elementwise import elementwise_kernel, elementwise_operands


def emit_layer(layer: Layer, kc: KernelContext) -> list[Node]:
    """The loop nest of one anchor layer, ending in Emit nodes."""
    fn = KERNELS.get(layer.op)
    if fn is not None:
        return fn(layer, kc)
    if layer.op in EXPRESSIONS:
        return elementwise_kernel(layer, kc)
    from ...errors import SolUnsupportedError

    raise SolUnsupportedError(f"layer {layer.name!r}: op {layer.op!r} has no generated implementation yet")


def emit_fused_pool(conv: Layer, fused: Layer, kc: KernelContext) -> list[Node]:
    """The loop nest of a conv with the pool of its chain (``fused``) computed depth first (see `conv_pool`)."""
    return conv_pool.conv_pool(conv, fused, kc)


def supported_ops() -> set[str]:
    """Ops with generated code: a kernel or expression of their own, or a lowering into such ops."""
    from ..lowering import UNLESS_IN_LIBRARY  # the lowering module imports the kernels

    return set(KERNELS) | set(EXPRESSIONS) | set(UNLESS_IN_LIBRARY)


__all__ = ["EXPRESSIONS", "FUSED_POOL_OPS", "KERNELS", "KernelContext", "elementwise_operands", "emit_fused_pool",
           "emit_layer", "fusable_pool", "supported_ops"]
