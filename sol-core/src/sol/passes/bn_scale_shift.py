"""An inference BatchNorm that no conv/linear absorbed becomes a per-channel multiply-add.

``fold_batch_norm`` folds a BatchNorm into the conv or linear that feeds it.
The rest (pre-activation networks: DenseNet's norm after each concatenation)
would compute ``(x - mean) / sqrt(var + eps) * gamma + beta`` per element: a
division and a square root for every value. This pass inserts param-only layers

    scale = gamma * rsqrt(var + eps)      (as fold_batch_norm computes it)
    shift = beta - mean * scale

(the codegen moves them into the "prepare" program, re-run when parameters
change, so nothing is baked) and replaces the BatchNorm with ``x * scale +
shift``, the statistics reshaped to broadcast over axis 1. Besides the
division, this removes a square root over constant arrays that GCC would not
vectorize (ONNX models' statistics are constants; light_densenet121's 56x56
norm clusters ran scalar, 0.84 ms where the same loop over runtime arrays takes
0.05 ms).
"""

from __future__ import annotations

from ..ir.graph import Graph, Layer, Tensor
from ._rewrite import insert_before, new_layers, replace_uses
from .bn_folding import batch_norm_scale


def _is_parameter_like(t: Tensor | None) -> bool:
    return t is None or t.kind in ("param", "const")


def _rewrite(graph: Graph, bn: Layer) -> None:
    x, mean = bn.inputs[0], bn.inputs[1]
    beta = bn.inputs[4] if len(bn.inputs) > 4 else None
    where = bn.name or "batch_norm"
    broadcast = (int(mean.shape[0]),) + (1,) * (x.rank - 2)
    result: dict[str, Tensor] = {}

    def build() -> None:
        scale = batch_norm_scale(graph, bn, where)
        (shift,) = graph.add_layer("mul", [mean, scale], name=f"{where}.mean_scaled")
        (shift,) = (graph.add_layer("sub", [beta, shift], name=f"{where}.shift") if beta is not None
                    else graph.add_layer("neg", [shift], name=f"{where}.shift"))
        (scale,) = graph.add_layer("reshape", [scale], {"shape": broadcast}, name=f"{where}.scale_b")
        (shift,) = graph.add_layer("reshape", [shift], {"shape": broadcast}, name=f"{where}.shift_b")
        (scaled,) = graph.add_layer("mul", [x, scale], name=f"{where}.mul")
        (result["y"],) = graph.add_layer("add", [scaled, shift], name=where)

    insert_before(graph, bn, new_layers(graph, build))
    replace_uses(graph, bn.outputs[0], result["y"])
    graph.layers.remove(bn)


def batch_norm_as_scale_shift(graph: Graph) -> Graph:
    for bn in [layer for layer in graph.layers if layer.op == "batch_norm"]:
        x = bn.inputs[0]
        if x.rank < 2 or len(bn.inputs) < 3 or not all(_is_parameter_like(t) for t in bn.inputs[1:]):
            continue
        if bn.inputs[1].rank != 1 or bn.outputs[0].dtype != x.dtype:
            continue
        _rewrite(graph, bn)
    return graph
