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
"""

from __future__ import annotations

from ..ir.graph import Graph
from ._rewrite import is_graph_output
from .budget import step


def linear_over_leading_dims(graph: Graph) -> Graph:
    for linear in [layer for layer in graph.layers if layer.op == "linear"]:
        producers, consumers = graph.producers(), graph.consumers()
        flat_in = linear.inputs[0]
        flatten = producers.get(id(flat_in))
        if flatten is None or flatten.op != "reshape" or flat_in.rank != 2:
            continue
        x = flatten.inputs[0]
        if x.rank < 3 or x.shape[-1] != flat_in.shape[-1]:
            continue  # not a flattening of the leading dims
        out = linear.outputs[0]
        readers = consumers.get(id(out), [])
        if len(readers) != 1 or is_graph_output(graph, out) or readers[0].op != "reshape":
            continue
        restore = readers[0]
        restored = restore.outputs[0]
        if restored.shape != (*x.shape[:-1], out.shape[-1]):
            continue  # the result is reshaped to something else than x's leading dims
        step(graph)
        linear.inputs = [x, *linear.inputs[1:]]
        linear.outputs = [restored]
        graph.layers.remove(restore)
        if not consumers.get(id(flat_in), [])[1:] and not is_graph_output(graph, flat_in):
            graph.layers.remove(flatten)  # the linear was its only reader
    return graph
