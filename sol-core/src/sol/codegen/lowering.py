"""Planning, the step before the layouts (part 0): layers a backend's library runs faster in pieces.

Some layers have a fused DFP kernel and also an exact decomposition into
layers a DNN module accepts. The module decides per layer
(`DnnModule.lowers`); the main program then carries the decomposition, and
clustering gives its heavy parts to the library like any other layer.

Attention without a mask, ``softmax(q @ k^T * scale) @ v``, becomes two
batched matmuls around a softmax; k is read transposed where it lies
(``matmul`` with ``transpose_b``) and the scale multiplies q. SOL's fused
attention loop keeps each query row's scores in registers, but it is no
GEMM: on two AVX2 cores it ran ViT-B/16's attention at ~40 GFLOP/s, where
oneDNN's batched GEMMs run both products at 130-150 GFLOP/s. The scores the
decomposition materialises (heads x L x S floats, 1.9 MB for ViT-B/16) stay
in cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import Graph, Layer, Tensor, TensorType
from .dnn import DnnModule


def lower_layers(layers: Sequence[Layer], dnn: DnnModule | None, graph: Graph) -> list[Layer]:
    """``layers`` with each layer the module asks for replaced by its decomposition (same outputs)."""
    if dnn is None:
        return list(layers)
    result: list[Layer] = []
    for layer in layers:
        decompose = DECOMPOSITIONS.get(layer.op)
        if decompose is not None and dnn.lowers(layer):
            result += decompose(layer, graph)
        else:
            result.append(layer)
    return result


def attention_as_matmuls(layer: Layer, graph: Graph) -> list[Layer]:
    """attention(q, k, v) without a mask -> matmul(q * scale, k^T), softmax, matmul(., v)."""
    if len(layer.inputs) != 3 or layer.attrs.get("is_causal", False):
        raise ValueError(f"attention {layer.name!r} has a mask: only unmasked attention is lowered")
    q, k, v = layer.inputs
    e = q.shape[-1]
    scale = layer.attrs.get("scale")
    scale = 1.0 / float(np.sqrt(e)) if scale is None else float(scale)
    build = _Builder(graph, layer.name)
    # the scale goes onto q (L x E, fused into the loop that writes q) rather than onto the L x S scores
    factor = graph.add_const(f"{layer.name}_scale", np.array(scale, dtype=np.dtype(q.dtype)))
    scaled = build("mul", [q, factor], {}, "scaled_q")
    scores = build("matmul", [scaled, k], {"transpose_b": True}, "scores")  # k read transposed where it lies
    weights = build("softmax", [scores], {"axis": scores.rank - 1}, "weights")
    build("matmul", [weights, v], {}, "", out=layer.outputs[0])
    return build.layers


class _Builder:
    """Layers of one decomposition; outputs come from the ops' shape rules, names from the lowered layer's."""

    def __init__(self, graph: Graph, name: str) -> None:
        self.graph, self.name = graph, name
        self.layers: list[Layer] = []

    def __call__(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any], part: str,
                 out: Tensor | None = None) -> Tensor:
        from ..ir.registry import get_op  # lazy, as in Graph.add_layer

        (kind,) = get_op(op, layer_name=self.name).infer([TensorType.of(t) for t in inputs], attrs)
        if out is None:
            out = Tensor(self.graph.unique_name(f"{self.name}_{part}"), kind.dims, kind.dtype)
        elif out.shape != kind.shape:
            raise AssertionError(f"lowering {self.name!r}: {op} gives {kind.shape}, the layer had {out.shape}")
        self.layers.append(Layer(op, list(inputs), [out], attrs, f"{self.name}.{part}" if part else self.name))
        return out


#: op -> its decomposition into library-friendly layers (the DNN module chooses when to use it)
DECOMPOSITIONS: dict[str, Callable[[Layer, Graph], list[Layer]]] = {"attention": attention_as_matmuls}
