"""Planning, part 1: the prepare/main split and depth-first clustering.

* prepare: every layer whose inputs are only parameters and constants (BN
  folding leaves mul/sqrt/reshape over parameters); its results are derived
  parameters, recomputed only when the parameters change.
* main: clustered depth first. A Cluster is an anchor layer plus the chain of
  elementwise layers after it that read one of the cluster's values at the
  same index; the chain is computed in the anchor's loop nest before the
  store, so intermediates stay in registers. A tensor consumed outside its
  cluster (or a model output) is materialised.
* reshape is a free alias of its (contiguous) input, except where its result
  must be a buffer of its own (a model output).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..ir import Graph, Layer, Tensor
from .kernels import EXPRESSIONS, elementwise_operands

ALIAS_OPS = frozenset({"reshape"})


@dataclass
class Cluster:
    anchor: Layer
    epilogue: list[Layer] = field(default_factory=list)
    #: reshape as a free view: no code, the output shares the input's storage
    alias: bool = False

    @property
    def layers(self) -> list[Layer]:
        return [self.anchor, *self.epilogue]

    def produces(self) -> list[Tensor]:
        return [t for layer in self.layers for t in layer.outputs]

    def title(self) -> str:
        names = " -> ".join(f"{layer.name} ({layer.op})" for layer in self.layers)
        return ("alias " if self.alias else "") + names


@dataclass
class Programs:
    prepare: list[Cluster]
    main: list[Cluster]
    #: the model outputs as the plan sees them (copies inserted where an output is not a fresh main value)
    outputs: list[Tensor]


def split_programs(graph: Graph) -> tuple[list[Layer], list[Layer], list[Tensor]]:
    """(prepare layers, main layers, outputs); copies are appended for outputs main does not produce itself."""
    static: set[int] = {id(t) for t in graph.params.values()}
    prepare: list[Layer] = []
    main: list[Layer] = []
    for layer in graph.layers:
        if layer.inputs and all(t.kind in ("param", "const") or id(t) in static for t in layer.inputs):
            prepare.append(layer)
            static.update(id(t) for t in layer.outputs)
        else:
            main.append(layer)
    produced = {id(t) for layer in main for t in layer.outputs if layer.op not in ALIAS_OPS}
    outputs: list[Tensor] = []
    seen: set[int] = set()
    for t in graph.outputs:
        if id(t) in produced and id(t) not in seen:
            outputs.append(t)
        else:
            # an input, parameter, constant, derived value or repeated output: copy it into the output buffer
            copy = Tensor(f"{t.name}_out{len(outputs)}", t.dims, t.dtype)
            main.append(Layer("identity", [t], [copy], {}, f"output{len(outputs)}"))
            outputs.append(copy)
        seen.add(id(outputs[-1]))
    return prepare, main, outputs


def cluster(layers: Sequence[Layer], available: set[int], outputs: Sequence[Tensor]) -> list[Cluster]:
    """Depth-first clusters of ``layers`` (topologically ordered); ``available``: tensors in memory before them."""
    available = set(available)
    output_ids = {id(t) for t in outputs}
    assigned: set[int] = set()
    clusters: list[Cluster] = []
    for i, layer in enumerate(layers):
        if id(layer) in assigned:
            continue
        assigned.add(id(layer))
        if layer.op in ALIAS_OPS and id(layer.outputs[0]) not in output_ids:
            current = Cluster(layer, alias=True)
        else:
            current = Cluster(layer)
            if len(layer.outputs) == 1:
                _grow(current, layers[i + 1:], available, assigned)
        clusters.append(current)
        available.update(id(t) for t in current.produces())
    return clusters


def _grow(current: Cluster, later: Sequence[Layer], available: set[int], assigned: set[int]) -> None:
    """Append the elementwise layers that continue the chain at the same index."""
    shape = current.anchor.outputs[0].shape
    registers = {id(current.anchor.outputs[0])}
    for layer in later:
        if id(layer) in assigned or layer.op not in EXPRESSIONS or len(layer.outputs) != 1:
            continue
        if layer.outputs[0].shape != shape:
            continue
        operands = elementwise_operands(layer)
        if not any(id(layer.inputs[i]) in registers for i in operands):
            continue
        fits = all(
            (id(t) in registers and i in operands and t.shape == shape) or id(t) in available
            or t.kind in ("input", "param", "const")
            for i, t in enumerate(layer.inputs)
        )
        if fits:
            current.epilogue.append(layer)
            assigned.add(id(layer))
            registers.add(id(layer.outputs[0]))


def plan_programs(graph: Graph) -> Programs:
    prepare_layers, main_layers, outputs = split_programs(graph)
    base = {id(t) for t in graph.params.values()}
    prepare = cluster(prepare_layers, base, [])
    derived = base | {id(t) for layer in prepare_layers for t in layer.outputs}
    main = cluster(main_layers, derived | {id(t) for t in graph.inputs}, outputs)
    return Programs(prepare, main, outputs)
