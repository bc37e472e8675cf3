"""Code generation: a planned graph -> one C++ source through the templates.

Each Cluster becomes one block: the anchor's loop nest, with every `Emit`
expanded into the fused elementwise chain and the stores of the values that
are materialised. Every statement carries the name of the layer it
implements, so the source reads against the user's model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._version import __version__
from ..ir import Graph, Layer, Tensor
from . import cexpr
from .cluster import Cluster, Programs
from .dnn import DnnCode
from .flavour import Flavour
from .kernels import EXPRESSIONS, KernelContext, elementwise_operands, emit_fused_pool, emit_layer
from .memory import MemoryPlan, materialised
from .nest import Emit, Node, Stmt, replace_emits
from .storage import STORAGE_CTYPES

FORWARD_SIGNATURE = ("void* ctx, const void** inputs, const void** params, void** outputs, void* workspace, "
                     "int64_t batch")
PREPARE_SIGNATURE = "void* ctx, const void** params, int64_t batch"


@dataclass
class RenderedCluster:
    index: int
    title: str
    nodes: list[Node]


@dataclass
class RenderedProgram:
    name: str
    doc: str
    signature: str
    pointers: list[str]
    clusters: list[RenderedCluster]


@dataclass
class ConstArray:
    name: str
    var: str
    ctype: str
    shape: str
    count: int
    values: str


def describe(layer: Layer) -> str:
    """A short human description, e.g. ``conv 3x3 s1`` (used in comments)."""
    a = layer.attrs
    if layer.op in ("conv", "conv_transpose") and len(layer.inputs) > 1:
        k = "x".join(str(s) for s in layer.inputs[1].shape[2:])
        strides = [int(v) for v in a.get("stride", ())] or [1]
        s = str(strides[0]) if len(set(strides)) == 1 else "x".join(map(str, strides))  # "s1" like SOL's listings
        extra = f" g{a['groups']}" if a.get("groups", 1) != 1 else ""
        return f"{layer.op} {k} s{s}{extra}"
    if layer.op in ("max_pool", "avg_pool"):
        return f"{layer.op} {'x'.join(map(str, a['kernel']))} s{'x'.join(map(str, a.get('stride') or a['kernel']))}"
    shown = {k: v for k, v in a.items() if k in ("axis", "axes", "perm", "negative_slope", "dtype", "approximate",
                                                 "groups", "num_groups", "output_size", "min", "max", "mode")}
    return layer.op + (" " + " ".join(f"{k}={v}" for k, v in shown.items()) if shown else "")


class _Namer:
    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, hint: str) -> str:
        base = cexpr.identifier(hint)
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name


def generate(graph: Graph, programs: Programs, memory: MemoryPlan, flavour: Flavour, prefix: str,
             profile: bool = False) -> str:
    """The complete source of one model's shared library (``profile``: time every forward cluster)."""
    needed = materialised(programs)
    namer = _Namer()
    consts: dict[int, ConstArray] = {}
    for c in [*programs.prepare, *programs.main]:
        for layer in c.layers:
            for t in layer.inputs:
                if t.kind == "const" and id(t) not in consts:
                    consts[id(t)] = _const_array(t, namer)
    calls = [c for c in programs.main if c.dnn is not None]
    # prepare packs the library calls' static weights, so it needs their pointers too
    packed = [c.anchor.inputs[i] for c in calls for i in (flavour.dnn.static_inputs(c.anchor) if flavour.dnn else ())]
    pre_pointers, pre_kc = _pointers(graph, programs.prepare, memory, consts, flavour, namer, True, packed,
                                     programs.layouts, {})
    fwd_pointers, fwd_kc = _pointers(graph, programs.main, memory, consts, flavour, namer, False, [], programs.layouts,
                                     programs.storage)
    library: dict[int, DnnCode] = {}
    for c in calls:
        assert flavour.dnn is not None and c.dnn is not None
        library[id(c)] = flavour.dnn.render(c.dnn, fwd_kc, pre_kc)
    rendered = []
    for name, clusters, doc, signature, pointers, kc in (
        ("prepare", programs.prepare, "prepare: derived parameters from the parameters (run when they change)",
         PREPARE_SIGNATURE, pre_pointers, pre_kc),
        ("forward", programs.main, "forward: one inference", FORWARD_SIGNATURE, fwd_pointers, fwd_kc),
    ):
        items = []
        for index, c in enumerate(clusters):
            if c.alias:
                continue
            if id(c) in library:
                nodes: list[Node] = [Stmt(line) for line in library[id(c)].forward]
            else:
                nodes = cluster_nodes(c, kc, needed)
                flavour.annotate(nodes)
            items.append(RenderedCluster(index, c.title(), nodes))
        if name == "prepare":
            packing = [Stmt(line) for code in library.values() for line in code.prepare]
            if packing:
                items.append(RenderedCluster(len(clusters), "library calls: pack weights", packing))
        rendered.append(RenderedProgram(name, doc, signature, pointers, items))
    return flavour.render_module(
        sol_version=__version__,
        model=graph.name,
        graph_hash=graph.structural_hash()[:16],
        flavour=flavour,
        prefix=prefix,
        consts=list(consts.values()),
        programs=rendered,
        prepare=[c for c in programs.prepare if not c.alias],
        main=[c for c in programs.main if not c.alias],
        workspace_c=memory.workspace.c_expr(),
        derived_bytes=memory.derived_bytes,
        library_globals=[line for code in library.values() for line in code.globals],
        library_init=[line for code in library.values() for line in code.init],
        profile=profile,
    )


def _const_array(t: Tensor, namer: _Namer) -> ConstArray:
    data = np.asarray(t.data).reshape(-1)
    ctype = cexpr.ctype(t.dtype, f"constant {t.name}")
    values = ", ".join(cexpr.literal(v.item(), t.dtype) for v in data) if data.size else "0"
    return ConstArray(t.name, namer(f"c_{t.name}"), ctype, str(list(t.shape)), max(int(data.size), 1), values)


def _pointers(graph: Graph, clusters: Sequence[Cluster], memory: MemoryPlan, consts: dict[int, ConstArray],
              flavour: Flavour, namer: _Namer, prepare: bool, extra: Sequence[Tensor],
              layouts: dict[int, tuple[int, ...]],
              programs_storage: dict[int, str]) -> tuple[list[str], KernelContext]:
    """Typed pointer declarations for every tensor the program touches; the KernelContext that names them."""
    lines: list[str] = []
    names: dict[int, str] = {}
    touched = [t for c in clusters for layer in c.layers for t in [*layer.inputs, *layer.outputs]]
    for t in [*touched, *extra]:
        if id(t) in names:
            continue
        root = memory.root(t)
        if root.kind == "const":  # a constant, or a reshape of one (a view of its array)
            names[id(t)] = consts[id(root)].var
            continue
        where = memory.of(t)
        if where is None:
            continue  # a register of its cluster
        stored = programs_storage.get(id(t))
        ct = STORAGE_CTYPES[stored] if stored else cexpr.ctype(t.dtype, f"tensor {t.name}")
        var = namer(f"t_{t.name}")
        names[id(t)] = var
        if where.kind == "input":
            src, const = f"inputs[{where.index}]", True
        elif where.kind == "param":
            src, const = f"params[{where.index}]", True
        elif where.kind == "output":
            src, const = f"outputs[{where.index}]", False
        elif where.kind == "derived":
            src, const = f"derived + {where.offset.c}", not prepare
        else:
            src, const = f"(char*)workspace + {where.offset.c_expr()}", False
        qual = "const " if const else ""
        order = f" order {list(layouts[id(t)])}" if id(t) in layouts else ""
        lines.append(f"{qual}{ct}* {var} = ({qual}{ct}*)({src});  // {t.name} {list(t.shape)}{order} "
                     f"({where.kind}{', stored as ' + stored if stored else ''})")
    return lines, KernelContext(flavour, names, layouts, programs_storage)


def cluster_nodes(c: Cluster, kc: KernelContext, needed: set[int]) -> list[Node]:
    """The loop nest of a generated Cluster with its fused chain and stores (also `sol.codegen.storage`'s probe)."""
    anchor = c.anchor
    nodes = emit_layer(anchor, kc) if c.pool is None else emit_fused_pool(anchor, c.pool, kc)

    def chain(layers: Sequence[Layer], index: tuple[str, ...], registers: dict[int, str]) -> list[Node]:
        out: list[Node] = []
        for layer in layers:
            t = layer.outputs[0]
            operands = elementwise_operands(layer)
            args = [registers.get(id(x)) or kc.load_broadcast(x, index, t.shape) if i in operands else ""
                    for i, x in enumerate(layer.inputs)]
            v = kc.fresh("v")
            expr = EXPRESSIONS[layer.op](layer, args, index, kc)
            out.append(Stmt(f"const {cexpr.ctype(t.dtype)} {v} = {expr};", f"{layer.name}: {describe(layer)}"))
            registers[id(t)] = v
            out += _store(t, v, index, kc, needed)
        return out

    def expand(emit: Emit) -> list[Node]:
        registers: dict[int, str] = {}
        # stage 1: a value of the fused pool, then the pool's epilogue
        layer, layers = (c.pool, c.pool_epilogue) if emit.stage == 1 and c.pool is not None else (anchor, c.epilogue)
        value_of = layer.outputs[emit.output]
        v = kc.fresh("v")
        out: list[Node] = [Stmt(f"const {cexpr.ctype(value_of.dtype)} {v} = {emit.value};",
                                f"{layer.name}: {describe(layer)}")]
        registers[id(value_of)] = v
        out += _store(value_of, v, emit.index, kc, needed)
        if emit.output == 0:  # the epilogue continues output 0 (see cluster._grow)
            out += chain(layers, emit.index, registers)
        if emit.into and c.pool is not None:  # the chain's last value: into the fused pool's window
            out.append(Stmt(f"{emit.into} = {registers[id(c.pool.inputs[0])]};", f"into {c.pool.name}'s window"))
        return out

    return replace_emits(nodes, expand)


def _store(t: Tensor, value: str, index: tuple[str, ...], kc: KernelContext, needed: set[int]) -> list[Node]:
    if id(t) not in needed:
        return []
    return [Stmt(kc.store(t, index, value), f"store {t.name}")]
