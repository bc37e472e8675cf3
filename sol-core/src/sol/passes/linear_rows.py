"""reshape(x, [rows, K]) -> linear -> reshape(., [..., N]) becomes one linear over x's own leading dims.

A linear layer takes any rank (it multiplies the last dimension), but
frontends flatten first: GPT-2's ``Conv1D`` is ``addmm(b, x.view(-1, K), W)``
followed by ``.view(*lead, N)``. The trailing reshape stands between the
linear and what comes next, so a DNN library could not take the residual
``add`` after it as a post-op (a post-op must have the call's own output
shape): each of GPT-2's twelve blocks ran its two residual adds as clusters
of their own. Without the reshapes the linear writes ``[..., N]`` directly
and the add fuses into the call.

Only a reshape pair that flattens exactly the leading dimensions and restores
the same ones is removed, so the rows, and every element's place, are unchanged.

A result reshape that only splits the rows (``[rows, N] -> [a, b, N]``, a*b =
rows) also goes when nothing flattened the input, or something else did:
PyTorch's multi-head attention flattens its heads into the output
projection's input and reshapes the result to [L, batch, E] before the
residual add. The input is reshaped to [a, b, K] instead (a free view, as
the input is row-major), and the linear writes [a, b, N] itself.
"""

from __future__ import annotations

from ..ir.graph import Graph, Size, as_size
from ..ir.ops._shapes import size_eq
from ._rewrite import is_graph_output
from .budget import step


def _rows(shape: tuple[Size, ...]) -> Size:
    rows: Size = 1
    for s in shape[:-1]:
        rows = as_size(rows * s)  # type: ignore[operator]
    return rows


def linear_over_leading_dims(graph: Graph) -> Graph:
    for linear in [layer for layer in graph.layers if layer.op == "linear"]:
        producers, consumers = graph.producers(), graph.consumers()
        flat_in = linear.inputs[0]
        out = linear.outputs[0]
        readers = consumers.get(id(out), [])
        if len(readers) != 1 or is_graph_output(graph, out) or readers[0].op != "reshape":
            continue
        restore = readers[0]
        restored = restore.outputs[0]
        flatten = producers.get(id(flat_in))
        x = flatten.inputs[0] if flatten is not None and flatten.op == "reshape" and flat_in.rank == 2 else None
        if x is None or x.rank < 3 or x.shape[-1] != flat_in.shape[-1] or \
                restored.shape != (*x.shape[:-1], out.shape[-1]):
            # no flattening of the same leading dims: a result reshape that only splits the rows takes the input
            # split the same way (see the module docstring)
            if (restored.rank <= out.rank or not size_eq(restored.shape[-1], out.shape[-1])
                    or not size_eq(_rows(restored.shape), _rows(out.shape))):
                continue
            step(graph)
            (split,) = graph.add_layer("reshape", [flat_in], {"shape": (*restored.shape[:-1], flat_in.shape[-1])},
                                       name=f"{linear.name}.rows")
            split_layer = graph.layers.pop()
            graph.layers.insert(graph.layers.index(linear), split_layer)
            linear.inputs = [split, *linear.inputs[1:]]
            linear.outputs = [restored]
            graph.layers.remove(restore)
            continue
        step(graph)
        linear.inputs = [x, *linear.inputs[1:]]
        linear.outputs = [restored]
        graph.layers.remove(restore)
        if not consumers.get(id(flat_in), [])[1:] and not is_graph_output(graph, flat_in):
            graph.layers.remove(flatten)  # the linear was its only reader
    return graph
