"""Remove layers none of whose outputs reach a graph output.

Parameters stay in ``graph.params`` even when unused: they are part of the
model's state_dict and of the compiled ABI.
"""

from __future__ import annotations

from ..ir.graph import Graph


def remove_dead_layers(graph: Graph) -> Graph:
    live = {id(t) for t in graph.outputs}
    kept = []
    for layer in reversed(graph.layers):
        if any(id(t) in live for t in layer.outputs):
            kept.append(layer)
            live.update(id(t) for t in layer.inputs)
    graph.layers = kept[::-1]
    return graph
