"""Small graph-editing helpers shared by the passes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..ir.graph import Graph, Layer, Tensor


def replace_uses(graph: Graph, old: Tensor, new: Tensor) -> None:
    """Make every consumer (and graph output) of ``old`` read ``new`` instead."""
    for layer in graph.layers:
        layer.inputs = [new if t is old else t for t in layer.inputs]
    graph.outputs = [new if t is old else t for t in graph.outputs]


def is_graph_output(graph: Graph, tensor: Tensor) -> bool:
    return any(t is tensor for t in graph.outputs)


def new_layers(graph: Graph, build: Any) -> list[Layer]:
    """Run ``build()`` (which calls graph.add_layer) and detach the layers it appended, for inserting elsewhere."""
    count = len(graph.layers)
    build()
    created = graph.layers[count:]
    del graph.layers[count:]
    return created


def insert_before(graph: Graph, anchor: Layer, layers: Sequence[Layer]) -> None:
    index = next(i for i, layer in enumerate(graph.layers) if layer is anchor)
    graph.layers[index:index] = list(layers)
