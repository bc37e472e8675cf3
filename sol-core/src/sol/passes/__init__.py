"""Framework-independent graph rewrites, one file per pass; each is a function Graph -> Graph (in place)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ir.graph import Graph
from .bn_folding import fold_batch_norm
from .bn_scale_shift import batch_norm_as_scale_shift
from .budget import pass_budget
from .channel_shuffle import fuse_channel_shuffle
from .constant_folding import fold_constants
from .conv_over_concat import conv_over_concat
from .cse import eliminate_common_subexpressions
from .dead_layers import remove_dead_layers
from .elementwise_before_permute import elementwise_before_permute
from .gelu_tanh import gelu_tanh_from_elementwise
from .linear_rows import linear_over_leading_dims
from .permute_as_reshape import permute_as_reshape
from .pool_before_concat import pool_before_concat
from .pool_before_pointwise_conv import pool_before_pointwise_conv
from .relu_maxpool import merge_relu_maxpool
from .remove_identity import remove_identity

#: The inference pipeline, in order: cleanup first so the pattern passes see the real producers,
#: CSE after the rewrites (BN folding can create equal param-only layers), DCE last.
INFERENCE_PASSES = (
    remove_identity,
    remove_dead_layers,
    elementwise_before_permute,  # before constant folding, which then folds the operands it reorders
    fold_constants,
    fold_batch_norm,
    batch_norm_as_scale_shift,
    fuse_channel_shuffle,
    permute_as_reshape,
    gelu_tanh_from_elementwise,  # after constant folding: its constants are folded scalars
    linear_over_leading_dims,
    merge_relu_maxpool,
    pool_before_pointwise_conv,
    pool_before_concat,
    conv_over_concat,
    eliminate_common_subexpressions,
    remove_dead_layers,
)


def run_passes(graph: Graph, passes: Sequence[Callable[[Graph], Graph]]) -> Graph:
    """Apply ``passes`` in order, each within its rewrite budget (`sol.passes.budget`): a pass that would not
    terminate raises `sol.errors.SolPassBudgetError` naming it and the model instead of hanging."""
    for apply in passes:
        with pass_budget(getattr(apply, "__name__", repr(apply)), graph):
            graph = apply(graph)
    return graph


def run_inference_passes(graph: Graph) -> Graph:
    return run_passes(graph, INFERENCE_PASSES)


__all__ = [
    "INFERENCE_PASSES", "batch_norm_as_scale_shift", "conv_over_concat", "eliminate_common_subexpressions", "elementwise_before_permute", "fold_batch_norm", "fold_constants", "gelu_tanh_from_elementwise", "linear_over_leading_dims", "fuse_channel_shuffle", "merge_relu_maxpool", "permute_as_reshape", "pool_before_concat", "pool_before_pointwise_conv",
    "remove_dead_layers", "remove_identity", "run_inference_passes", "run_passes",
]
