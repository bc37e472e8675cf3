"""max_pool(relu(x)) -> relu(max_pool(x)): the ReLU then touches the pooled (smaller) tensor.

Valid for any monotonic non-decreasing elementwise op (relu, clamp): it
commutes with max. Max pooling never sees a window made only of padding, so
padding with -inf does not change the result either.
"""

from __future__ import annotations

from ..ir.graph import Graph, Tensor
from ._rewrite import sole_reader_pairs

_MONOTONIC = ("relu", "clamp")


def merge_relu_maxpool(graph: Graph) -> Graph:
    for act, pool in sole_reader_pairs(graph, ("max_pool",), _MONOTONIC):
        pooled_out = pool.outputs[0]
        pooled = Tensor(graph.unique_name(f"{pool.name}_pre_{act.op}"), pooled_out.dims, pooled_out.dtype)
        # Swap: the pool reads the activation's input, the activation writes the pool's old output.
        pool.inputs = [act.inputs[0]]
        pool.outputs = [pooled]
        act.inputs = [pooled]
        act.outputs = [pooled_out]
        graph.layers.remove(act)
        graph.layers.insert(graph.layers.index(pool) + 1, act)
    return graph
