"""conv(concat(a, b, ...), w) -> conv(a, w_a) + conv(b, w_b) + ...: the concatenation is never written.

A convolution without groups sums over its input channels, so over a
concatenation along channels it is the sum of one convolution per part, each
with that part's slice of the weights (zero padding pads every part alike).
The bias goes with the first part; every later part's convolution adds the
running sum as a full-size residual, which the library call fuses as a
binary post-op. The weight slices are parameter-only layers, recomputed in
the prepare program when the parameters change.

The concatenation was one more pass over memory: SqueezeNet's fire modules
concatenate their two expand convolutions (55 x 55 x 128 floats in the first
two), and the next module's squeeze convolution is the only reader. That copy
costs 17 us with the data in cache and 100 us in this VM's slow phases, when
other tenants evict it (`sol.profile`, 2-core AVX-512 VM); a later part costs
one more library call and a read of the running sum instead. Whole models,
the pass on against off in paired rounds in one process (x86, 20-30 rounds),
with the build that has the pass compiled first: squeezenet1_1 1.080x (IQR
1.068-1.105), 1.084x, 1.062x, 1.062x; compiled second: 1.040x, 1.005x,
0.998x. Two identical builds compared the same way gave the first 1.040x and
1.058x, so about half of the first numbers is the compile order, and the
pass gains squeezenet1_1 some 2-3% (squeezenet1_0 1.051x, built first;
light_squeezenet.onnx 1.004x and 1.024x, built second).

Done only when nothing else reads the concatenation and it is larger than
the convolution's result (the running sum each later part reads): a squeeze
to fewer channels, not SqueezeNet's classifier (512 -> 1000 channels).
"""

from __future__ import annotations

import math

from ..ir.graph import Graph, Layer, Tensor
from ..ir.ops._shapes import normalize_axis
from ._rewrite import insert_before, new_layers, sole_reader_pairs


def _per_sample(tensor: Tensor) -> int | None:
    """Elements per batch sample, when every dim after the batch is static."""
    sizes = tensor.shape[1:]
    return math.prod(int(s) for s in sizes) if all(isinstance(s, int) for s in sizes) else None


def _splittable(conv: Layer, concat: Layer) -> bool:
    joined = concat.outputs[0]
    if int(conv.attrs.get("groups", 1)) != 1:
        return False
    if normalize_axis(int(concat.attrs["axis"]), joined.rank) != 1 or len(concat.inputs) < 2:
        return False
    if not all(isinstance(part.shape[1], int) for part in concat.inputs):
        return False
    joined_size, result_size = _per_sample(joined), _per_sample(conv.outputs[0])
    return joined_size is not None and result_size is not None and joined_size > result_size


def _split(graph: Graph, conv: Layer, concat: Layer) -> list[Layer]:
    """The layers of the per-part convolutions and their sum; the last one writes the convolution's result."""
    weights = conv.inputs[1]
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None

    def build() -> None:
        start = 0
        total: Tensor | None = None
        for i, part in enumerate(concat.inputs):
            stop = start + int(part.shape[1])
            (w,) = graph.add_layer("slice", [weights], {"axis": 1, "start": start, "stop": stop, "step": 1},
                                   name=f"{conv.name}.weight_part{i}")
            inputs = [part, w] + ([bias] if bias is not None and i == 0 else [])
            (y,) = graph.add_layer("conv", inputs, dict(conv.attrs), name=f"{conv.name}.part{i}")
            # the part's result first: the library call that computes it is the add's anchor
            total = y if total is None else graph.add_layer("add", [y, total], name=f"{conv.name}.sum{i}")[0]
            start = stop

    layers = new_layers(graph, build)
    layers[-1].outputs = [conv.outputs[0]]
    return layers


def conv_over_concat(graph: Graph) -> Graph:
    for concat, conv in sole_reader_pairs(graph, ("conv",), ("concat",)):
        if not _splittable(conv, concat):
            continue
        insert_before(graph, conv, _split(graph, conv, concat))
        graph.layers.remove(conv)
        graph.layers.remove(concat)
    return graph
