"""avg_pool(conv1x1(x)) -> conv1x1(avg_pool(x)): the convolution then runs on the pooled (smaller) tensor.

A 1x1 convolution with stride 1 and no padding is the same linear map
(plus bias) at every pixel, and an average pool without padding is, per
output pixel, a weighted sum of input pixels whose weights add up to 1. The
two commute exactly: pool(W.x + b) = W.pool(x) + b. DenseNet's transition
layers (1x1 conv, then 2x2 average pooling) get 4x fewer convolution FLOPs.

Not done when the pool pads (padded zeros would break the bias term), has
a divisor override, or rounds its output size up (partial windows), nor
when anything else reads the convolution's result.
"""

from __future__ import annotations

from ..ir.graph import Graph, Layer, Tensor
from ._rewrite import sole_reader_pairs


def _no_padding(padding: object) -> bool:
    """Whether a padding attr (per-dim ints or (begin, end) pairs) pads nothing."""
    pads = padding if isinstance(padding, (tuple, list)) else (padding,)
    return all(int(p) == 0 for pad in pads for p in (pad if isinstance(pad, (tuple, list)) else (pad,)))


def _pointwise(conv: Layer) -> bool:
    if conv.op != "conv":  # the producer may be any layer (a pad, ...), whose inputs[1] need not exist
        return False
    spatial = conv.inputs[1].shape[2:]
    return (
        all(k == 1 for k in spatial)
        and all(int(s) == 1 for s in conv.attrs.get("stride", (1,) * len(spatial)))
        and _no_padding(conv.attrs.get("padding", ()))
    )


def _exact_average(pool: Layer) -> bool:
    attrs = pool.attrs
    return (
        pool.op == "avg_pool"
        and _no_padding(attrs.get("padding", ()))
        and attrs.get("divisor_override") is None
        and not attrs.get("ceil_mode", False)
    )


def pool_before_pointwise_conv(graph: Graph) -> Graph:
    for conv, pool in sole_reader_pairs(graph, ("avg_pool",), ("conv",)):
        if not _exact_average(pool) or not _pointwise(conv):
            continue
        x = conv.inputs[0]
        out = pool.outputs[0]
        pooled_dims = (*x.dims[:2], *out.dims[2:])  # x's batch and channels, the pool's spatial size
        pooled = Tensor(graph.unique_name(f"{pool.name}_before_{conv.name}"), pooled_dims, x.dtype)
        # Swap: the pool reads the convolution's input, the convolution writes the pool's old output.
        pool.inputs = [x]
        pool.outputs = [pooled]
        conv.inputs = [pooled, *conv.inputs[1:]]
        conv.outputs = [out]
        graph.layers.remove(pool)
        graph.layers.insert(graph.layers.index(conv), pool)
    return graph
