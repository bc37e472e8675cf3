"""reshape (N, g, C/g, ...) -> permute (0, 2, 1, ...) -> reshape (N, C, ...): one ``channel_shuffle`` layer.

ShuffleNet writes its channel shuffle as view/transpose/view (PyTorch) or
Reshape/Transpose/Reshape (ONNX). As three layers it is two copies, and
the reshapes need plain (NCHW) tensors, so a channels-last model pays a
layout conversion on each side of every shuffle. ``channel_shuffle`` is
one gather that reads and writes any layout.
"""

from __future__ import annotations

from ..ir.graph import Graph, Layer
from ._rewrite import only_reader


def _shuffle_groups(split: Layer, swap: Layer, merge: Layer) -> int | None:
    """g when the three layers are the channel shuffle of split's input with g groups, else None."""
    x, grouped, back = split.inputs[0], split.outputs[0], merge.outputs[0]
    if split.op != "reshape" or swap.op != "permute" or merge.op != "reshape" or x.rank < 3:
        return None
    rank = x.rank
    if grouped.rank != rank + 1 or back.shape != x.shape:
        return None
    n, c, *spatial = x.shape
    g, per_group = grouped.shape[1], grouped.shape[2]
    if grouped.shape[0] != n or tuple(grouped.shape[3:]) != tuple(spatial) or not isinstance(g, int):
        return None
    if g * per_group != c or tuple(swap.attrs["perm"]) != (0, 2, 1, *range(3, rank + 1)):
        return None
    return g


def fuse_channel_shuffle(graph: Graph) -> Graph:
    consumers = graph.consumers()
    for split in list(graph.layers):
        if split.op != "reshape" or split not in graph.layers:
            continue
        swap = only_reader(graph, consumers, split.outputs[0])
        merge = only_reader(graph, consumers, swap.outputs[0]) if swap is not None and swap.op == "permute" else None
        if swap is None or merge is None:
            continue
        groups = _shuffle_groups(split, swap, merge)
        if groups is None:
            continue
        shuffle = Layer("channel_shuffle", [split.inputs[0]], list(merge.outputs), {"groups": groups}, merge.name)
        graph.layers[graph.layers.index(merge)] = shuffle
        graph.layers.remove(split)
        graph.layers.remove(swap)
        consumers = graph.consumers()
    return graph
