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
  must be a buffer of its own (a model output). So is a permute whose output
  layout keeps every element where the input has it (see
  `sol.codegen.layout.permuted_layout`).
* with a DNN module (``Flavour.dnn``), every layer the library accepts is a
  DNN cluster: one library call, with the following elementwise layers the
  library fuses (bias, activation, residual add) as post-ops. A post-op
  continues the chain only while the previous value has no other reader,
  because the library never materialises intermediate values. A library call
  may also take over the `mul` that scales its input per channel
  (squeeze-excitation's gate, `DnnModule.absorbs_input_scale`): that mul is
  the call's prologue, and the scaled tensor is never written.
* a generated conv also takes the pool after its chain (conv -> relu ->
  avg_pool/max_pool/adaptive pooling) when the pool is the only reader of the
  chain's last value and nothing else of the cluster is read outside it: the
  pool runs depth first in the conv's nest (`sol.codegen.kernels.conv_pool`),
  so the full-size activation is never written; elementwise layers after the
  pool continue at the pool's index (``pool_epilogue``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..ir import Graph, Layer, Tensor
from .dnn import DnnCall, DnnModule, scale_operands
from .layout import Layouts, plain, plan_layouts, same_memory, same_memory_permute
from .lowering import lower_layers
from .views import View, operand_views, result_views

ALIAS_OPS = frozenset({"reshape"})


@dataclass
class Cluster:
    anchor: Layer
    epilogue: list[Layer] = field(default_factory=list)
    #: layers a library call runs before its anchor (an input scale it folds into the weights)
    prologue: list[Layer] = field(default_factory=list)
    #: reshape as a free view: no code, the output shares the input's storage
    alias: bool = False
    #: a library call of the flavour's DNN module (anchor + post-ops), else generated DFP code
    dnn: DnnCall | None = None
    #: a pool computed depth first from the epilogue's last value (a generated conv's), then its own epilogue
    pool: Layer | None = None
    pool_epilogue: list[Layer] = field(default_factory=list)

    @property
    def layers(self) -> list[Layer]:
        return [*self.prologue, self.anchor, *self.epilogue, *([self.pool] if self.pool else []), *self.pool_epilogue]

    def produces(self) -> list[Tensor]:
        return [t for layer in self.layers for t in layer.outputs]

    def title(self) -> str:
        names = " -> ".join(f"{layer.name} ({layer.op})" for layer in self.layers)
        return ("alias " if self.alias else "DNN " if self.dnn else "") + names


@dataclass
class Programs:
    prepare: list[Cluster]
    main: list[Cluster]
    #: the model outputs as the plan sees them (copies inserted where an output is not a fresh main value)
    outputs: list[Tensor]
    #: memory order of every tensor that is not plain row-major (see `sol.codegen.layout`)
    layouts: Layouts = field(default_factory=dict)
    #: tensor id -> the reduced dtype a float32 activation is stored in (see `sol.codegen.storage`); absent: its own
    storage: dict[int, str] = field(default_factory=dict)


def split_programs(graph: Graph) -> tuple[list[Layer], list[Layer], list[Tensor]]:
    """(prepare layers, main layers, outputs); copies are appended for outputs main does not produce itself."""
    static: set[int] = {id(t) for t in graph.params.values()}
    prepare: list[Layer] = []
    main: list[Layer] = []
    for layer in graph.layers:
        # Derived parameters have one fixed size, computed when prepare runs: a layer whose output
        # grows with the batch (e.g. a class token expanded to N rows) must run in main, every call.
        batch_free = all(t.is_static for t in layer.outputs)
        if layer.inputs and batch_free and all(t.kind in ("param", "const") or id(t) in static for t in layer.inputs):
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


def cluster(layers: Sequence[Layer], available: set[int], outputs: Sequence[Tensor],
            dnn: DnnModule | None = None, static: frozenset[int] = frozenset(),
            layouts: Layouts | None = None) -> list[Cluster]:
    """Depth-first clusters of ``layers`` (topologically ordered); ``available``: tensors in memory before them.

    ``static``: the parameters and the values derived from them only (what a library call may pack);
    ``layouts``: the planned layouts, which library calls see when they choose post-ops.
    """
    available = set(available)
    output_ids = {id(t) for t in outputs}
    readers: dict[int, int] = {}
    for layer in layers:
        for t in layer.inputs:
            readers[id(t)] = readers.get(id(t), 0) + 1
    assigned: set[int] = set()
    clusters: list[Cluster] = []
    calls = 0
    scales = _input_scales(layers, dnn, static, readers, output_ids, layouts or {}) if dnn is not None else {}
    assigned.update(id(mul) for mul in scales.values())  # each runs inside the call that reads it
    views = _library_views(layers, dnn, static, readers, output_ids, layouts or {}, scales) if dnn is not None else {}
    for operands, result in views.values():  # their layers run inside the call that reads (writes) through them
        assigned.update(id(v) for view in [*operands.values(), *([result] if result else [])] for v in view.layers)
    for i, layer in enumerate(layers):
        if id(layer) in assigned:
            continue
        assigned.add(id(layer))
        free_view = layer.op in ALIAS_OPS or (layer.op == "permute" and same_memory_permute(layer, layouts or {}))
        if free_view and id(layer.outputs[0]) not in output_ids:
            current = Cluster(layer, alias=True)
        elif dnn is not None and runs_in_library(dnn, layer, static):
            scale = scales.get(id(layer))
            operands, result = views.get(id(layer), ({}, None))
            before = [v for index in sorted(operands) for v in operands[index].layers]
            current = Cluster(layer, dnn=DnnCall(calls, layer, layouts=layouts or {}, input_scale=scale,
                                                 views=operands, result_view=result),
                              prologue=[*([scale] if scale else []), *before])
            calls += 1
            if result is not None:  # the call writes the view's last tensor: no post-ops (nothing reads its value)
                current.epilogue.extend(result.layers)
            else:
                _grow_post_ops(current, dnn, layers[i + 1:], available, assigned, readers, output_ids)
        else:
            current = Cluster(layer)
            _grow(current, layers[i + 1:], available, assigned)
            _fuse_pool(current, layers[i + 1:], available, assigned, readers, output_ids)
        clusters.append(current)
        available.update(id(t) for t in current.produces())
    return clusters


def _input_scales(layers: Sequence[Layer], dnn: DnnModule, static: frozenset[int], readers: dict[int, int],
                  output_ids: set[int], layouts: Layouts) -> dict[int, Layer]:
    """id(library layer) -> the `mul` before it that its call takes over (`DnnModule.absorbs_input_scale`): a mul
    whose result only that layer reads, as its input 0, and that lies in memory like the tensor it scales."""
    made_by = {id(t): layer for layer in layers for t in layer.outputs}
    found: dict[int, Layer] = {}
    for layer in layers:
        mul = made_by.get(id(layer.inputs[0])) if layer.inputs else None
        if mul is None or mul.op != "mul" or len(mul.inputs) != 2 or len(mul.outputs) != 1:
            continue
        scaled = mul.outputs[0]
        if readers.get(id(scaled), 0) != 1 or id(scaled) in output_ids or not runs_in_library(dnn, layer, static):
            continue
        source, _ = scale_operands(mul)
        plain_order = plain(scaled.rank)
        if source.shape == scaled.shape and dnn.absorbs_input_scale(mul, layer) and same_memory(
                scaled, layouts.get(id(source), plain_order), layouts.get(id(scaled), plain_order)):
            found[id(layer)] = mul
    return found


def _library_views(layers: Sequence[Layer], dnn: DnnModule, static: frozenset[int], readers: dict[int, int],
                   output_ids: set[int], layouts: Layouts,
                   scales: dict[int, Layer]) -> dict[int, tuple[dict[int, View], View | None]]:
    """id(library layer) -> (input index -> the view its call reads that input through, the view it writes its result
    through or None), for the longest view chains the module takes (`sol.codegen.views`). A chain's layers belong to
    one call only; earlier calls choose first."""
    made_by = {id(t): layer for layer in layers for t in layer.outputs}
    consumers: dict[int, list[Layer]] = {}
    for layer in layers:
        for t in layer.inputs:
            consumers.setdefault(id(t), []).append(layer)
    taken: set[int] = set()
    found: dict[int, tuple[dict[int, View], View | None]] = {}
    for layer in layers:
        if not runs_in_library(dnn, layer, static) or len(layer.outputs) != 1:
            continue
        operands: dict[int, View] = {}
        for index in range(len(layer.inputs)):
            if index == 0 and id(layer) in scales:
                continue  # input 0 is the scaled tensor the call never reads
            view = next((v for v in operand_views(layer, index, made_by, readers, output_ids, taken, layouts)
                         if dnn.reads_view(layer, index, v)), None)
            if view is not None:
                operands[index] = view
                taken.update(id(v) for v in view.layers)
        result = next((v for v in result_views(layer, consumers, output_ids, taken, layouts)
                       if dnn.writes_view(layer, v)), None)
        if result is not None:
            taken.update(id(v) for v in result.layers)
        if operands or result is not None:
            found[id(layer)] = (operands, result)
    return found


def _grow(current: Cluster, later: Sequence[Layer], available: set[int], assigned: set[int],
          start: Tensor | None = None, chain: list[Layer] | None = None) -> None:
    """Append the elementwise layers that continue the chain at the same index.

    The chain continues the anchor's output 0 (e.g. the activation after a training batch norm, whose other
    outputs are its statistics): its kernel emits each element of that output once, with its index.
    ``start``/``chain``: another value to continue and the list to append to (a fused pool's output).
    """
    # imported here, not at the top: the kernels register every op, which loading a cached model never needs
    from .kernels import EXPRESSIONS, elementwise_operands

    start = current.anchor.outputs[0] if start is None else start
    chain = current.epilogue if chain is None else chain
    shape = start.shape
    registers = {id(start)}
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
            chain.append(layer)
            assigned.add(id(layer))
            registers.add(id(layer.outputs[0]))


def _fuse_pool(current: Cluster, later: Sequence[Layer], available: set[int], assigned: set[int],
               readers: dict[int, int], output_ids: set[int]) -> None:
    """Take the pool that reads the cluster's chain into a generated conv's cluster (depth first, see the module
    docstring), and the elementwise layers after the pool."""
    from .kernels import FUSED_POOL_OPS, fusable_pool

    if current.anchor.op != "conv" or current.alias or current.dnn is not None:
        return
    values = {id(t) for layer in current.layers for t in layer.outputs}
    pool = next((layer for layer in later if id(layer) not in assigned and layer.op in FUSED_POOL_OPS
                 and len(layer.inputs) == 1 and len(layer.outputs) == 1 and id(layer.inputs[0]) in values), None)
    if pool is None or not fusable_pool(current.anchor, pool):
        return
    # the fused nest stores only the pool's values: every value of the chain must be read inside the cluster only
    inside: dict[int, int] = {}
    for layer in [*current.layers, pool]:
        for t in layer.inputs:
            inside[id(t)] = inside.get(id(t), 0) + 1
    for layer in current.layers:
        for t in layer.outputs:
            if id(t) in output_ids or readers.get(id(t), 0) != inside.get(id(t), 0):
                return
    current.pool = pool
    assigned.add(id(pool))
    _grow(current, later, available, assigned, pool.outputs[0], current.pool_epilogue)


def runs_in_library(dnn: DnnModule, layer: Layer, static: set[int] | frozenset[int]) -> bool:
    """The module accepts the layer and its packed inputs are parameters (or derived from them only)."""
    return dnn.accepts(layer) and all(
        layer.inputs[i].kind in ("param", "const") or id(layer.inputs[i]) in static for i in dnn.static_inputs(layer))


def _grow_post_ops(current: Cluster, dnn: DnnModule, later: Sequence[Layer], available: set[int], assigned: set[int],
                   readers: dict[int, int], output_ids: set[int]) -> None:
    """Append the chain of layers the library fuses into the call (each reads the previous value, its only reader)."""
    call = current.dnn
    assert call is not None
    value = current.anchor.outputs[0]
    for layer in later:
        if readers.get(id(value), 0) != 1 or id(value) in output_ids:
            return
        if id(layer) in assigned or not any(t is value for t in layer.inputs):
            continue
        others_ready = all(t is value or id(t) in available or t.kind in ("input", "param", "const")
                           for t in layer.inputs)
        if not (others_ready and dnn.fuses(call, value, layer)):
            return
        call.post_ops.append(layer)
        current.epilogue.append(layer)
        assigned.add(id(layer))
        value = layer.outputs[0]


def plan_programs(graph: Graph, dnn: DnnModule | None = None,
                  flavour_lowers: Callable[[Layer], bool] | None = None) -> Programs:
    prepare_layers, main_layers, outputs = split_programs(graph)
    main_layers = lower_layers(main_layers, dnn, graph, flavour_lowers)
    if dnn is not None:
        dnn.sees(main_layers)
    base = {id(t) for t in graph.params.values()}
    derived = base | {id(t) for layer in prepare_layers for t in layer.outputs}
    # inputs that arrive in another layout (a backward's saved activations), and outputs whose layout is free
    given = {id(t): t.layout for t in graph.inputs if t.layout is not None}
    fixed = [t for i, t in enumerate(outputs) if i not in graph.free_layout_outputs]
    main_layers, layouts = plan_layouts(main_layers, fixed, dnn,
                                        lambda layer: dnn is not None and runs_in_library(dnn, layer, derived), given)
    prepare = cluster(prepare_layers, base, [])
    main = cluster(main_layers, derived | {id(t) for t in graph.inputs}, outputs, dnn, frozenset(derived), layouts)
    return Programs(prepare, main, outputs, layouts)
