"""Reverse-mode differentiation of a SOL Graph into a training forward and a backward Graph.

``derive`` walks the forward layers in reverse, calls each op's gradient
rule (`sol.ir.registry`), and sums the gradients of values read more than
once. Both results are ordinary Graphs, compiled by the same pipeline as
inference (passes, clustering, layouts, memory planning, codegen), so the
backward is fused and scheduled like any model and may pick its own
layouts. Only the values some rule reads are kept from the forward: they
become extra outputs of the training forward ("saved") and inputs of the
backward.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import SolUnsupportedError
from ..ir import Graph, Layer, Tensor, get_op
from ..ir.ops._grad import differentiable
from ..ir.ops._shapes import size_eq
from .builder import Builder


@dataclass(frozen=True)
class Saved:
    """Where the backward's saved input comes from: a forward ``output`` position or a forward ``input`` index."""

    source: str
    index: int


@dataclass
class TrainingGraphs:
    #: the model's graph returning its own outputs first, then the saved activations
    forward: Graph
    #: inputs: gradients of ``differentiable`` outputs, then ``saved`` values; outputs: ``param_grads``, then ``input_grads``
    backward: Graph
    #: how many of forward's outputs are the model's
    model_outputs: int
    differentiable: list[int] = field(default_factory=list)
    saved: list[Saved] = field(default_factory=list)
    param_grads: list[str] = field(default_factory=list)
    input_grads: list[int] = field(default_factory=list)

    def free_saved_layouts(self) -> None:
        """Let the forward's planner leave the saved activations in the layout their producers write.

        For a forward and a backward compiled separately: what the backward needs goes only from one to the
        other, so a copy into plain memory and another one back would be wasted (see `read_saved_layouts`).
        """
        self.forward.free_layout_outputs = set(range(self.model_outputs, len(self.forward.outputs)))

    def read_saved_layouts(self, output_layouts: Mapping[str, Sequence[int]]) -> None:
        """Declare the backward's saved inputs in the layouts the compiled forward reported for its outputs
        (its ``metadata["output_layouts"]``: output position -> memory order, for the non-plain ones)."""
        first = len(self.differentiable)
        for k, source in enumerate(self.saved):
            order = output_layouts.get(str(source.index)) if source.source == "output" else None
            self.backward.inputs[first + k].layout = tuple(order) if order is not None else None


def copy_graph(graph: Graph, name: str) -> Graph:
    """A graph sharing the tensors but not the layer objects (passes rewrite layers in place)."""
    out = Graph(name)
    out.inputs = list(graph.inputs)
    out.params = dict(graph.params)
    out.outputs = list(graph.outputs)
    out.layers = [Layer(layer.op, list(layer.inputs), list(layer.outputs), dict(layer.attrs), layer.name) for layer in graph.layers]
    out._names = set(graph._names)  # unique_name must not reuse the original's names
    return out


def _requiring(graph: Graph, params: Collection[str], inputs: Collection[int]) -> set[int]:
    """Ids of the float tensors that depend on a parameter or input the gradient is taken of."""
    requires = {id(graph.params[n]) for n in params if n in graph.params and differentiable(graph.params[n])}
    requires |= {id(graph.inputs[i]) for i in inputs if differentiable(graph.inputs[i])}
    for layer in graph.layers:
        if any(id(t) in requires for t in layer.inputs):
            requires.update(id(t) for t in layer.outputs if differentiable(t))
    return requires


class _Gradients:
    """Gradient contributions per forward tensor, summed on first use."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self._parts: dict[int, list[Tensor]] = {}

    def add(self, tensor: Tensor, grad: Tensor) -> None:
        if grad.rank != tensor.rank or not all(size_eq(a, b) for a, b in zip(grad.shape, tensor.shape, strict=True)):
            raise SolUnsupportedError(f"internal error: gradient of {tensor.name} has shape {list(grad.shape)}, "
                                      f"expected {list(tensor.shape)} (layer {self.builder.where!r})")
        self._parts.setdefault(id(tensor), []).append(grad)

    def has(self, tensor: Tensor) -> bool:
        return id(tensor) in self._parts

    def total(self, tensor: Tensor) -> Tensor | None:
        parts = self._parts.get(id(tensor))
        if not parts:
            return None
        total = parts[0]
        for part in parts[1:]:
            total = self.builder.one("add", [total, part])
        self._parts[id(tensor)] = [total]
        return total


def derive(graph: Graph, params: Collection[str], inputs: Collection[int] = (),
           non_differentiable: Collection[int] = ()) -> TrainingGraphs:
    """Gradients of ``graph``'s outputs w.r.t. ``params`` (framework names) and ``inputs`` (indices).

    ``non_differentiable``: output positions that get no incoming gradient (e.g. running-statistics updates).
    """
    forward = copy_graph(graph, f"{graph.name}_train")
    _mark_trained(forward, params)
    requires = _requiring(forward, params, inputs)
    builder = Builder(forward, requires, f"{graph.name}_backward")
    grads = _Gradients(builder)
    result = TrainingGraphs(forward, builder.graph, len(forward.outputs))
    for k, t in enumerate(forward.outputs):
        if k in non_differentiable or id(t) not in requires:
            continue
        grads.add(t, builder.graph.add_input(f"grad_output{k}", t.dims, t.dtype))
        result.differentiable.append(k)
    for layer in reversed(forward.layers):
        if not any(grads.has(t) for t in layer.outputs) or not any(id(t) in requires for t in layer.inputs):
            continue
        rule = get_op(layer.op, layer_name=layer.name).gradient
        if rule is None:
            raise SolUnsupportedError(f"layer {layer.name!r}: op {layer.op!r} has no gradient rule, so SOL cannot train "
                                      "through it yet; freeze the parameters before it or run that part in PyTorch")
        builder.where = layer.name
        incoming = [grads.total(t) for t in layer.outputs]
        for t, g in zip(layer.inputs, rule(layer, incoming, builder), strict=True):
            if g is not None and id(t) in requires:
                grads.add(t, g)
    builder.where = ""
    outputs: list[Tensor] = []
    for name, tensor in forward.params.items():
        if name in params and (g := grads.total(tensor)) is not None:
            outputs.append(g)
            result.param_grads.append(name)
    for i, tensor in enumerate(forward.inputs):
        if i in inputs and (g := grads.total(tensor)) is not None:
            outputs.append(g)
            result.input_grads.append(i)
    builder.graph.outputs = outputs
    result.saved = _save(forward, builder.saved)
    return result


def _mark_trained(forward: Graph, params: Collection[str]) -> None:
    """Flag the layers that read a trained parameter (attr ``trained_params``).

    Those parameters change after every step, so a library that packs weights into its own format
    once per update (oneDNN's blocked layouts) pays that reorder on every step: the backend may
    prefer the weights as they lie.
    """
    trained = {id(forward.params[n]) for n in params if n in forward.params}
    for layer in forward.layers:
        if any(id(t) in trained for t in layer.inputs):
            layer.attrs["trained_params"] = True


def _save(forward: Graph, saved: list[tuple[Tensor, Tensor]]) -> list[Saved]:
    """Make every saved forward value reachable: an input is passed again, anything else becomes an output."""
    inputs = {id(t): i for i, t in enumerate(forward.inputs)}
    positions = {id(t): k for k, t in enumerate(forward.outputs)}
    out: list[Saved] = []
    for tensor, _ in saved:
        if id(tensor) in inputs:
            out.append(Saved("input", inputs[id(tensor)]))
            continue
        if id(tensor) not in positions:
            positions[id(tensor)] = len(forward.outputs)
            forward.outputs.append(tensor)
        out.append(Saved("output", positions[id(tensor)]))
    return out
