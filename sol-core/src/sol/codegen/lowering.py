"""Planning, the step before the layouts (part 0): layers a backend runs faster in pieces.

Some layers have a fused DFP kernel and also an exact decomposition. The DNN
module decides per layer where a library takes the parts
(`DnnModule.lowers`), the flavour where its generated code runs the parts
better (`Flavour.lowers`); the main program then carries the decomposition,
and clustering gives its heavy parts to the library like any other layer.

Attention without a mask, ``softmax(q @ k^T * scale) @ v``, becomes two
batched matmuls around a softmax; k is read transposed where it lies
(``matmul`` with ``transpose_b``) and the scale multiplies q, or the scores
where the module applies it as a post-op of the product
(`DnnModule.scales_scores`: x86 reads q where it lies, `sol.codegen.views`). SOL's fused
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

Batch norm training becomes two-level means (per sample and channel, then per
channel) and elementwise layers where a flavour asks (CUDA: the fused kernel
reduces a whole channel on one warp).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..ir import Graph, Layer, Tensor, is_static
from ..ir.ops._shapes import normalize_axis
from .dnn import DnnModule


def lower_layers(layers: Sequence[Layer], dnn: DnnModule | None, graph: Graph,
                 flavour_lowers: Callable[[Layer], bool] | None = None) -> list[Layer]:
    """``layers`` with each layer the module (or the flavour, ``flavour_lowers``) asks for replaced by its
    decomposition (same outputs)."""
    result: list[Layer] = []
    for layer in layers:
        decompose = DECOMPOSITIONS.get(layer.op)
        split = UNLESS_IN_LIBRARY.get(layer.op)
        asked = (dnn is not None and dnn.lowers(layer)) or (flavour_lowers is not None and flavour_lowers(layer))
        if decompose is not None and asked and layer.op == "attention" and dnn is not None and dnn.scales_scores(layer):
            result += attention_as_matmuls(layer, graph, scale_scores=True)
        elif decompose is not None and asked:
            result += decompose(layer, graph)
        elif split is not None and not (dnn is not None and dnn.accepts(layer)):
            result += split(layer, graph)
        else:
            result.append(layer)
    return result


def attention_as_matmuls(layer: Layer, graph: Graph, scale_scores: bool = False) -> list[Layer]:
    """attention(q, k, v, [mask]) -> matmul(q * scale, k^T), [+ mask | where(mask, ., -inf)], softmax, matmul(., v).

    A float mask is added to the scores, a bool mask keeps the scores where it is true (the others become -inf),
    ``is_causal`` is a constant lower-triangular bool mask (static lengths only). ``scale_scores``: the scale
    multiplies the scores instead (matmul(q, k^T) * scale), for a library that applies it as a post-op of the
    product and reads q where it lies (`sol.codegen.views`): no pass over q at all."""
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
    if scale_scores:
        (product,) = graph.add_layer("matmul", [q, k], {"transpose_b": True}, name=f"{layer.name}.scores")
        (scores,) = graph.add_layer("mul", [product, factor], name=f"{layer.name}.scaled")
    else:
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


def _static_count(layer: Layer) -> int:
    """The elements per channel of a batch norm's input (every dim but 1); static batch sizes only."""
    sizes = [s for d, s in enumerate(layer.inputs[0].shape) if d != 1]
    if not all(is_static(s) for s in sizes):
        raise ValueError(f"batch norm {layer.name!r}: the batch size varies, the fused kernel keeps it")
    return int(np.prod([int(s) for s in sizes]))


def _channel_stats(graph: Graph, value: Tensor, name: str, rank: int) -> Tensor:
    """The mean over every dim but 1 of ``value`` [N, C, *S], kept as [1, C, 1..]: a mean per (n, c) over the
    pixels first (a work item per sample and channel), then over the batch (equal counts: the mean of means)."""
    if rank > 2:
        (value,) = graph.add_layer("reduce_mean", [value], {"axes": tuple(range(2, rank)), "keepdims": True},
                                   name=f"{name}.pixels")
    (value,) = graph.add_layer("reduce_mean", [value], {"axes": (0,), "keepdims": True}, name=f"{name}.batch")
    return value


def _per_channel(graph: Graph, t: Tensor, rank: int, name: str) -> Tensor:
    """A [C] tensor as [1, C, 1..] to broadcast against [N, C, *S]."""
    (out,) = graph.add_layer("reshape", [t], {"shape": (1, t.shape[0]) + (1,) * (rank - 2)},
                             name=name)
    return out


def _as_vector(graph: Graph, t: Tensor, name: str) -> Tensor:
    (out,) = graph.add_layer("reshape", [t], {"shape": (t.shape[1],)}, name=name)
    return out


def batch_norm_train_as_reductions(layer: Layer, graph: Graph) -> list[Layer]:
    """batch_norm_train(x, [w], [b]) -> (y, mean, invstd, unbiased var) from two-level means.

    The fused kernel reduces each channel on one work item (a GPU warp): 64 channels of N x 56 x 56 pixels keep
    64 warps busy. Here the per-channel statistics are means over (sample, channel) items first, then over the
    batch, and y is an elementwise Cluster; the variance is the mean of squared deviations (two passes, as the
    kernel). Static batch sizes (training graphs are captured per batch)."""
    x = layer.inputs[0]
    rank, count = x.rank, _static_count(layer)
    name = layer.name
    eps = graph.add_const(f"{name}_eps", np.array(layer.attrs["eps"], dtype=np.dtype(x.dtype)))
    bessel = graph.add_const(f"{name}_bessel", np.array(count / max(count - 1, 1), dtype=np.dtype(x.dtype)))
    start = len(graph.layers)
    mean = _channel_stats(graph, x, f"{name}.mean", rank)
    (centred,) = graph.add_layer("sub", [x, mean], name=f"{name}.centred")
    (squares,) = graph.add_layer("mul", [centred, centred], name=f"{name}.squares")
    var = _channel_stats(graph, squares, f"{name}.var", rank)
    (shifted,) = graph.add_layer("add", [var, eps], name=f"{name}.var_eps")
    (invstd,) = graph.add_layer("rsqrt", [shifted], name=f"{name}.invstd")
    (y,) = graph.add_layer("mul", [centred, invstd], name=f"{name}.normalised")
    if len(layer.inputs) > 1 and layer.inputs[1] is not None:
        (y,) = graph.add_layer("mul", [y, _per_channel(graph, layer.inputs[1], rank, f"{name}.weight")],
                               name=f"{name}.scaled")
    if len(layer.inputs) > 2 and layer.inputs[2] is not None:
        (y,) = graph.add_layer("add", [y, _per_channel(graph, layer.inputs[2], rank, f"{name}.bias")],
                               name=f"{name}.shifted")
    (unbiased,) = graph.add_layer("mul", [var, bessel], name=f"{name}.unbiased")
    results = [y, _as_vector(graph, mean, f"{name}.mean_c"), _as_vector(graph, invstd, f"{name}.invstd_c"),
               _as_vector(graph, unbiased, f"{name}.unbiased_c")]
    return _take(graph, start, layer, results)


def batch_norm_train_grad_as_reductions(layer: Layer, graph: Graph) -> list[Layer]:
    """batch_norm_train_grad(dy, x, mean, invstd, [w]) -> (dx, dweight, dbias) from two-level sums (as
    `batch_norm_train_as_reductions`): dbias = sum dy, dweight = sum dy * xhat, and dx elementwise."""
    dy, x, mean, invstd = layer.inputs[:4]
    rank, count = x.rank, _static_count(layer)
    name = layer.name
    scale = graph.add_const(f"{name}_count", np.array(count, dtype=np.dtype(x.dtype)))
    start = len(graph.layers)
    mean4, invstd4 = (_per_channel(graph, t, rank, f"{name}.{what}") for t, what in ((mean, "mean"), (invstd, "invstd")))
    (centred,) = graph.add_layer("sub", [x, mean4], name=f"{name}.centred")
    (xhat,) = graph.add_layer("mul", [centred, invstd4], name=f"{name}.xhat")
    (dy_xhat,) = graph.add_layer("mul", [dy, xhat], name=f"{name}.dy_xhat")
    sums = []
    for value, what in ((dy, "dbias"), (dy_xhat, "dweight")):  # means times the count: the sums
        (total,) = graph.add_layer("mul", [_channel_stats(graph, value, f"{name}.{what}", rank), scale],
                                   name=f"{name}.{what}_sum")
        sums.append(total)
    dbias4, dweight4 = sums
    factor = invstd4
    if len(layer.inputs) > 4 and layer.inputs[4] is not None:
        (factor,) = graph.add_layer("mul", [invstd4, _per_channel(graph, layer.inputs[4], rank, f"{name}.weight")],
                                    name=f"{name}.factor")
    # dx = factor / count * (count * dy - dbias - xhat * dweight)
    (scaled_dy,) = graph.add_layer("mul", [dy, scale], name=f"{name}.count_dy")
    (minus_bias,) = graph.add_layer("sub", [scaled_dy, dbias4], name=f"{name}.minus_dbias")
    (xhat_dw,) = graph.add_layer("mul", [xhat, dweight4], name=f"{name}.xhat_dweight")
    (inner,) = graph.add_layer("sub", [minus_bias, xhat_dw], name=f"{name}.inner")
    (per_count,) = graph.add_layer("div", [factor, scale], name=f"{name}.per_count")
    (dx,) = graph.add_layer("mul", [inner, per_count], name=f"{name}.dx")
    results = [dx, _as_vector(graph, dweight4, f"{name}.dweight_c"), _as_vector(graph, dbias4, f"{name}.dbias_c")]
    return _take(graph, start, layer, results)


#: a column reduction (the reduced dims lead and some dims are kept: a bias gradient, dy [rows, C] summed over the
#: rows) over at least this many rows can run in two stages (`column_reduction_in_stages`)
SPLIT_ROWS = 512
#: the stages' group counts tried, largest first: the first that divides the rows into groups of >= 8 rows
ROW_GROUPS = (64, 32, 16, 8)


def column_reduction_groups(layer: Layer) -> int | None:
    """How many row groups `column_reduction_in_stages` splits ``layer`` into, None where it does not apply: a
    float reduce_sum/reduce_mean of a static shape over its leading dims (some kept) and >= `SPLIT_ROWS` rows."""
    if layer.op not in ("reduce_sum", "reduce_mean") or not layer.inputs:
        return None
    x = layer.inputs[0]
    if not x.dtype.startswith("float") or x.rank < 2 or not all(is_static(s) for s in x.shape):
        return None
    axes = sorted({normalize_axis(a, x.rank) for a in layer.attrs["axes"]})
    if not axes or axes != list(range(len(axes))) or len(axes) == x.rank:
        return None
    rows = int(np.prod([int(s) for s in x.shape[:len(axes)]]))
    if rows < SPLIT_ROWS:
        return None
    return next((g for g in ROW_GROUPS if rows % g == 0 and rows // g >= 8), None)


def column_reduction_in_stages(layer: Layer, graph: Graph) -> list[Layer]:
    """reduce(x [R.., C..]) over the leading dims -> reduce(reduce(x as [G, R/G, C..], axis 1), axis 0).

    The generated column reduction gives each task 64 columns and streams all rows through it: a transformer's
    bias gradient (2048 rows x 768 columns) was 12 GPU warps of 2048 rows each, 1.3-1.7 ms per layer on an H100.
    In stages, G groups of rows are summed in parallel (G x 12 warps), then the G partial rows. A mean is the mean
    of the groups' means (equal counts)."""
    groups = column_reduction_groups(layer)
    if groups is None:
        raise ValueError(f"{layer.name!r} is not a column reduction over >= {SPLIT_ROWS} rows of a static shape")
    x = layer.inputs[0]
    lead = len({normalize_axis(a, x.rank) for a in layer.attrs["axes"]})
    rows = int(np.prod([int(s) for s in x.shape[:lead]]))
    kept = tuple(int(s) for s in x.shape[lead:])
    start = len(graph.layers)
    (grouped,) = graph.add_layer("reshape", [x], {"shape": (groups, rows // groups, *kept)}, name=f"{layer.name}.groups")
    (part,) = graph.add_layer(layer.op, [grouped], {"axes": (1,), "keepdims": False}, name=f"{layer.name}.part")
    (total,) = graph.add_layer(layer.op, [part], {"axes": (0,), "keepdims": False}, name=f"{layer.name}.total")
    if layer.attrs.get("keepdims", False):
        (total,) = graph.add_layer("reshape", [total], {"shape": (1,) * lead + kept}, name=f"{layer.name}.kept")
    return _take(graph, start, layer, [total])


def _take(graph: Graph, start: int, layer: Layer, results: list[Tensor]) -> list[Layer]:
    """The layers added since ``start``, taken back out of the graph, writing ``layer``'s own outputs."""
    created = graph.layers[start:]
    del graph.layers[start:]
    for tensor, out in zip(results, layer.outputs, strict=True):
        producer = next(lay for lay in reversed(created) if any(o is tensor for o in lay.outputs))
        index = next(i for i, o in enumerate(producer.outputs) if o is tensor)
        producer.outputs[index] = out  # the consumers read the layer's own tensors
    return created


#: op -> its decomposition (the DNN module or the flavour chooses when to use it)
DECOMPOSITIONS: dict[str, Callable[[Layer, Graph], list[Layer]]] = {
    "attention": attention_as_matmuls,
    "batch_norm_train": batch_norm_train_as_reductions,
    "batch_norm_train_grad": batch_norm_train_grad_as_reductions,
    "reduce_sum": column_reduction_in_stages,
    "reduce_mean": column_reduction_in_stages,
}


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
