"""Common-subexpression elimination: a layer equal to an earlier one (op, inputs, attrs) reuses its outputs."""

from __future__ import annotations

from ..ir.graph import Graph, Tensor
from ._rewrite import replace_uses


def _key(value: object) -> object:
    if isinstance(value, dict):
        return tuple(sorted((k, _key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_key(v) for v in value)
    return repr(value)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    seen: dict[object, list[Tensor]] = {}
    kept = []
    for layer in graph.layers:
        key = (layer.op, tuple(id(t) for t in layer.inputs), _key(layer.attrs))
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = layer.outputs
            kept.append(layer)
            continue
        for mine, theirs in zip(layer.outputs, earlier, strict=True):
            replace_uses(graph, mine, theirs)
    graph.layers = kept
    return graph
