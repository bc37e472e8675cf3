"""Operators of the ``ai.onnx.preview.training`` domain that SOL computes with its own autodiff.

``Gradient(xs, y)`` returns dy/dx for every x of ``xs``: the layers the
import has built so far are differentiated by `sol.autodiff.derive` (each
op's gradient rule from the registry), with y's incoming gradient all ones
(ONNX's rule), and the backward layers are added to the model's graph, so
they are compiled (and fused) with the rest of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.autodiff import derive
from sol.ir import Graph, Tensor

from ._registry import handler

TRAINING_DOMAIN = "ai.onnx.preview.training"


def _named(ctx: Any, name: str) -> Tensor:
    tensor = ctx.values.get(name)
    if not isinstance(tensor, Tensor):
        raise ctx.unsupported(f"{name!r} is not a tensor defined before the node")
    return tensor


def _filled(ctx: Any, value: Tensor, like: Tensor) -> Tensor:
    """The 0-d ``value`` in ``like``'s shape."""
    return value if like.rank == 0 else ctx.one("expand", [value], {"shape": tuple(like.shape)})


@handler("Gradient")
def gradient(ctx: Any) -> list[Tensor]:
    if ctx.node.domain != TRAINING_DOMAIN:
        raise ctx.unsupported(f"Gradient of domain {ctx.node.domain!r} (expected {TRAINING_DOMAIN!r})")
    xs = [_named(ctx, n.decode() if isinstance(n, bytes) else str(n)) for n in ctx.attr("xs", [])]
    y = _named(ctx, ctx.sattr("y", ""))
    if len(xs) != ctx.num_outputs:
        raise ctx.unsupported(f"{len(xs)} xs for {ctx.num_outputs} outputs")
    graph: Graph = ctx.graph
    # The model so far, as a graph from the xs (and every other leaf, not differentiated) to y.
    sub = Graph(f"{graph.name}_gradient")
    sub.params = dict(graph.params)
    sub.layers = list(graph.layers)
    sub.inputs = list(xs) + [t for t in graph.inputs if all(t is not x for x in xs)]
    sub.outputs = [y]
    sub._names = set(graph._names)
    wanted = [i for i, x in enumerate(xs) if x.dtype.startswith("float")]
    training = derive(sub, params=(), inputs=wanted)
    backward = training.backward
    # the backward's inputs: y's gradient (ones), then the forward values its rules read
    mapping: dict[int, Tensor] = {}
    if training.differentiable:
        one = ctx.const(np.ones((), dtype=y.dtype), name="seed")
        mapping[id(backward.inputs[0])] = _filled(ctx, one, y)
    for saved, value in zip(training.saved, backward.inputs[len(training.differentiable):], strict=True):
        source = training.forward.inputs if saved.source == "input" else training.forward.outputs
        mapping[id(value)] = source[saved.index]
    for name, value in backward.params.items():
        mapping[id(value)] = graph.params[name]
    for layer in backward.layers:
        inputs = [mapping.get(id(t), t) for t in layer.inputs]
        outs = ctx.layer(layer.op, inputs, dict(layer.attrs))
        for old, new in zip(layer.outputs, outs, strict=True):
            mapping[id(old)] = new
    grads = {i: mapping.get(id(t), t) for i, t in zip(training.input_grads, backward.outputs, strict=True)}
    results = []
    for i, x in enumerate(xs):
        g = grads.get(i)
        if g is None:  # y does not depend on x
            g = _filled(ctx, ctx.const(np.zeros((), dtype=x.dtype), name="zero"), x)
        results.append(g)
    return results
