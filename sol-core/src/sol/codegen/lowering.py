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

A recurrent layer (``rnn``) runs whole in a library that has RNN primitives
(oneDNN's LSTM/GRU/vanilla RNN): the module accepts it. Everywhere else it
is always split: one ``linear`` for the input projection of all time steps
(a single GEMM, itself a library call where there is one), then the
``rnn_recurrence`` time loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..ir import Graph, Layer, is_static
from .dnn import DnnModule


def lower_layers(layers: Sequence[Layer], dnn: DnnModule | None, graph: Graph) -> list[Layer]:
    """``layers`` with each layer the module asks for replaced by its decomposition (same outputs)."""
    result: list[Layer] = []
    for layer in layers:
        decompose = DECOMPOSITIONS.get(layer.op)
        split = UNLESS_IN_LIBRARY.get(layer.op)
        if decompose is not None and dnn is not None and dnn.lowers(layer):
            result += decompose(layer, graph)
        elif split is not None and not (dnn is not None and dnn.accepts(layer)):
            result += split(layer, graph)
        else:
            result.append(layer)
    return result


def attention_as_matmuls(layer: Layer, graph: Graph) -> list[Layer]:
    """attention(q, k, v, [mask]) -> matmul(q * scale, k^T), [+ mask | where(mask, ., -inf)], softmax, matmul(., v).

    A float mask is added to the scores, a bool mask keeps the scores where it is true (the others become -inf),
    ``is_causal`` is a constant lower-triangular bool mask (static lengths only)."""
    q, k, v = layer.inputs[:3]
    mask = layer.inputs[3] if len(layer.inputs) > 3 else None
    causal = bool(layer.attrs.get("is_causal", False))
    if causal and not (is_static(q.shape[-2]) and is_static(k.shape[-2])):
        raise ValueError(f"attention {layer.name!r} is causal with lengths that vary: it stays one fused loop")
    scale = layer.attrs.get("scale")
    scale = 1.0 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)
    # Graph.add_layer names the tensors and infers their shapes; the layers are taken back out of the graph
    # (the decomposition lives only in this compile's main program)
    count = len(graph.layers)
    # the scale goes onto q (L x E, fused into the loop that writes q) rather than onto the L x S scores
    factor = graph.add_const(f"{layer.name}_scale", np.array(scale, dtype=np.dtype(q.dtype)))
    (scaled,) = graph.add_layer("mul", [q, factor], name=f"{layer.name}.scaled_q")
    (scores,) = graph.add_layer("matmul", [scaled, k], {"transpose_b": True},  # k read transposed where it lies
                                name=f"{layer.name}.scores")
    masks = [mask] if mask is not None else []
    if causal:
        length, source = int(q.shape[-2]), int(k.shape[-2])
        masks.append(graph.add_const(f"{layer.name}_causal", np.tril(np.ones((length, source), dtype=bool))))
    for index, m in enumerate(masks):
        where = f"{layer.name}.mask{index}"
        if m.dtype == "bool":
            lowest = graph.add_const(f"{where}_excluded", np.array(-np.inf, dtype=np.dtype(q.dtype)))
            (scores,) = graph.add_layer("where", [m, scores, lowest], name=where)
        else:
            (scores,) = graph.add_layer("add", [scores, m], name=where)
    (weights,) = graph.add_layer("softmax", [scores], {"axis": scores.rank - 1}, name=f"{layer.name}.weights")
    graph.add_layer("matmul", [weights, v], name=layer.name)
    created = graph.layers[count:]
    del graph.layers[count:]
    created[-1].outputs = list(layer.outputs)  # the attention's consumers read the last product
    return created


#: op -> its decomposition into library-friendly layers (the DNN module chooses when to use it)
DECOMPOSITIONS: dict[str, Callable[[Layer, Graph], list[Layer]]] = {"attention": attention_as_matmuls}


def rnn_as_projection_and_loop(layer: Layer, graph: Graph) -> list[Layer]:
    """rnn(x, h0, [c0], w_ih, w_hh, b_ih, b_hh) -> linear(x, w_ih, b_ih), rnn_recurrence(., h0, [c0], w_hh, b_hh)."""
    from ..ir.ops.recurrent import forward_inputs, mode_of, named

    mode = mode_of(layer.attrs)
    ins = named(layer.inputs, forward_inputs(mode, full=True), layer.name)
    count = len(graph.layers)
    (projected,) = graph.add_layer("linear", [ins["x"], ins["w_ih"], ins["b_ih"]], name=f"{layer.name}.input_projection")
    recurrent = [projected if name == "xp" else ins[name] for name in forward_inputs(mode, full=False)]
    graph.add_layer("rnn_recurrence", recurrent, dict(layer.attrs), name=layer.name)
    created = graph.layers[count:]
    del graph.layers[count:]
    created[-1].outputs = list(layer.outputs)
    return created


#: op -> its split into generated code and library-friendly layers, used unless the DNN module runs the op whole
UNLESS_IN_LIBRARY: dict[str, Callable[[Layer, Graph], list[Layer]]] = {"rnn": rnn_as_projection_and_loop}
