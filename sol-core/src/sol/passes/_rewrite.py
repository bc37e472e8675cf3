"""Small graph-editing helpers shared by the passes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..ir.graph import Graph, Layer, Tensor
from .budget import step


def replace_uses(graph: Graph, old: Tensor, new: Tensor) -> None:
    """Make every consumer (and graph output) of ``old`` read ``new`` instead."""
    for layer in graph.layers:
        layer.inputs = [new if t is old else t for t in layer.inputs]
    graph.outputs = [new if t is old else t for t in graph.outputs]


def is_graph_output(graph: Graph, tensor: Tensor) -> bool:
    return any(t is tensor for t in graph.outputs)


def only_reader(graph: Graph, consumers: dict[int, list[Layer]], tensor: Tensor) -> Layer | None:
    """The one layer that reads ``tensor``, or None when more or none do or it is a model output (kept as is)."""
    users = consumers.get(id(tensor), [])
    if len(users) != 1 or is_graph_output(graph, tensor):
        return None
    return users[0]


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


def sole_reader_pairs(graph: Graph, consumer_ops: Sequence[str],
                      producer_ops: Sequence[str]) -> Iterator[tuple[Layer, Layer]]:
    """(producer, consumer) pairs a pass may rewrite: a layer of ``consumer_ops`` whose input 0 a layer of
    ``producer_ops`` writes, and nothing else reads (nor is it a model output).

    The caller may rewrite each pair before asking for the next one: the layers are visited in their order
    before the pass started, and the producer/consumer maps are rebuilt after each pair.
    """
    producers = graph.producers()
    consumers = graph.consumers()
    for consumer in list(graph.layers):  # a copy: callers move and replace layers
        if consumer.op not in consumer_ops or not consumer.inputs:
            continue
        producer = producers.get(id(consumer.inputs[0]))
        if producer is None or producer.op not in producer_ops:
            continue
        if only_reader(graph, consumers, consumer.inputs[0]) is None:
            continue
        step(graph)
        yield producer, consumer
        producers = graph.producers()
        consumers = graph.consumers()
