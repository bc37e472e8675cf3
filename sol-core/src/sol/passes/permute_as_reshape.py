"""permute -> reshape where the permutation only moves dims of size 1: the bytes do not move.

Transformer code transposes between batch-first and sequence-first around
every attention (``x.transpose(0, 1)`` of a [1, L, E] tensor at batch 1). As
a permute, each is a copy of the whole activation; as a reshape it is a free
view of the same buffer. A wildcard batch dim is not known to be 1, so it
counts as a dim that moves.
"""

from __future__ import annotations

from ..ir.graph import Graph, is_static


def _is_one(size: object) -> bool:
    return is_static(size) and int(size) == 1  # type: ignore[call-overload]


def permute_as_reshape(graph: Graph) -> Graph:
    for layer in graph.layers:
        if layer.op != "permute":
            continue
        x, out = layer.inputs[0], layer.outputs[0]
        moved = [d for d in layer.attrs["perm"] if not _is_one(x.shape[d])]
        if moved == sorted(moved):  # the dims of size > 1 keep their order: same memory
            layer.op = "reshape"
            layer.attrs = {"shape": tuple(out.shape)}
    return graph
