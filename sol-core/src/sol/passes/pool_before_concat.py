"""pool(concat(a, b, ...)) -> concat(pool(a), pool(b), ...) for a concatenation over channels (or batch).

Pooling windows span only the spatial dims, so each channel is pooled on its
own and the two commute exactly (any kernel, stride, padding or divisor
rule). The concatenation then copies the pooled, smaller tensors: after
SqueezeNet's fire modules and GoogLeNet's inception blocks, a 3x3 stride-2
max pool makes that copy 4x smaller, and the full-size concatenated tensor
is never written. Paired rounds (whole model, the pass on against off, 30
rounds): squeezenet1_1 1.018x (IQR 1.007-1.033), squeezenet1_0 1.026x
(1.001-1.040), googlenet 1.000x (0.989-1.007).

Not done when anything else reads the concatenation's result.
"""

from __future__ import annotations

from ..ir.graph import Graph, Layer
from ..ir.ops._shapes import normalize_axis
from ._rewrite import insert_before, new_layers, sole_reader_pairs

_POOLS = ("max_pool", "avg_pool")


def _over_leading_dims(concat: Layer, pool: Layer) -> bool:
    """Whether the concatenation joins along a dim the pool does not window (batch or channels)."""
    rank = concat.outputs[0].rank
    axis = normalize_axis(int(concat.attrs["axis"]), rank)
    return axis < rank - len(pool.attrs["kernel"])


def pool_before_concat(graph: Graph) -> Graph:
    for concat, pool in sole_reader_pairs(graph, _POOLS, ("concat",)):
        if len(pool.outputs) != 1 or not _over_leading_dims(concat, pool):
            continue
        parts = concat.inputs

        def build(parts: list = parts, pool: Layer = pool) -> None:  # type: ignore[type-arg]
            for i, part in enumerate(parts):
                graph.add_layer(pool.op, [part], dict(pool.attrs), name=f"{pool.name}.part{i}")

        pooled = new_layers(graph, build)
        # The concatenation now joins the pooled parts into the pool's old output, so its readers are unchanged.
        concat.inputs = [layer.outputs[0] for layer in pooled]
        concat.outputs = [pool.outputs[0]]
        insert_before(graph, concat, pooled)
        graph.layers.remove(pool)
    return graph
