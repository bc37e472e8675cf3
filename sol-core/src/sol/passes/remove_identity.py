"""Drop layers that are the identity in inference (identity, dropout, stochastic_depth, contiguous)."""

from __future__ import annotations

from ..ir.graph import Graph
from ..ir.ops import IDENTITY_OPS
from ._rewrite import replace_uses


def remove_identity(graph: Graph) -> Graph:
    kept = []
    for layer in graph.layers:
        if layer.op in IDENTITY_OPS and len(layer.inputs) == 1 and len(layer.outputs) == 1:
            replace_uses(graph, layer.outputs[0], layer.inputs[0])
        else:
            kept.append(layer)
    graph.layers = kept
    return graph
