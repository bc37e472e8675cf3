"""Planning, part 1b: which float32 activations are stored in a reduced type (bf16 between library calls).

In a reduced precision (`sol.precision`, e.g. bf16) the library calls read
their operands in that type. A float32 activation that goes into such a call
would be converted on every call: one more pass over memory and a reorder
per call. Where the DNN module can read and write the reduced type itself
(`DnnModule.reduced_storage`), a tensor is stored in it instead when

* it is a workspace tensor: never a model input, output, parameter or
  derived parameter (inputs and outputs keep the user's dtype);
* at least one reader is a library call that reads it as a reduced operand
  (`DnnModule.reads_reduced`): that is where the saving is;
* every other reader can read it too: a library call that says so, or
  generated code that reads it only through `KernelContext.load` (which
  widens to float32; generated code computes in float32 throughout);
* its producer can write it: a library call (`DnnModule.writes_reduced`,
  which writes the reduced type directly with fp32 post-ops), or generated
  code that stores it through `KernelContext.store` (rounding once).

Whether generated code touches a tensor only through load/store is found by
rendering each generated Cluster once with a probing `KernelContext`: a
kernel that indexes a tensor's raw pointer (`KernelContext.ptr`) keeps that
tensor in its own dtype. Reshape views share their source's storage, so a
source and its views are decided together.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Tensor
from .cluster import Cluster, Programs
from .dnn import DnnModule

#: changes whenever the choice of stored tensors or its code changes: part of the cache key of modules that store
#: reduced (generated code differs without the graph or the toolchain changing)
VERSION = 4

#: C type generated code declares a tensor stored in a reduced dtype with (its bits; see prelude_cpu.j2)
STORAGE_CTYPES = {"bfloat16": "uint16_t"}


class _Names(dict[int, str]):
    """Pointer names for the probe: every tensor has one."""

    def __missing__(self, key: int) -> str:
        return f"p{key}"


def plan_storage(programs: Programs, dnn: DnnModule | None, inputs: Sequence[Tensor],
                 params: Sequence[Tensor], flavour: object = None) -> dict[int, str]:
    """tensor id -> reduced storage dtype, for the roots and their views alike (empty: everything as it is)."""
    dtype = dnn.reduced_storage() if dnn is not None else None
    if dtype is None:
        return {}
    from .memory import materialised  # memory sizes tensors by this plan

    needed = materialised(programs)
    fixed = {id(t) for t in [*inputs, *params, *programs.outputs]}
    fixed |= {id(t) for c in programs.prepare for t in c.produces()}
    root: dict[int, Tensor] = {}
    members: dict[int, list[Tensor]] = {}
    for c in programs.main:
        if c.alias:
            src, dst = c.anchor.inputs[0], c.anchor.outputs[0]
            top = root.get(id(src), src)
            root[id(dst)] = top
            members.setdefault(id(top), [top]).append(dst)

    def top(t: Tensor) -> Tensor:
        return root.get(id(t), t)

    writable: dict[int, Tensor] = {}  # candidate roots whose producer can write the reduced type
    refused: set[int] = set()  # roots some reader or the producer cannot take in the reduced type
    wanted: set[int] = set()  # roots a library call reads as a reduced operand
    for c in programs.main:
        if c.alias:
            continue
        if c.dnn is not None:
            out = c.dnn.output
            if dnn.writes_reduced(c.dnn):
                writable[id(out)] = out
            # operands read through a view (sol.codegen.views): the call reads the view's base as that operand,
            # and the view's own layers generate nothing
            through = {id(v) for view in [*c.dnn.views.values(), *([c.dnn.result_view] if c.dnn.result_view else [])]
                       for v in view.layers}
            for index, view in c.dnn.views.items():
                reads = dnn.reads_reduced(c.dnn, c.anchor, index)
                (wanted if reads else refused).add(id(top(view.base)))
            for layer in c.layers:
                if id(layer) in through:
                    continue
                for i, t in enumerate(layer.inputs):
                    if layer is c.anchor and i in c.dnn.views:
                        continue
                    if not dnn.reads_reduced(c.dnn, layer, i):
                        refused.add(id(top(t)))
                    else:
                        wanted.add(id(top(t)))
            continue
        raw = _raw_accesses(c, programs, needed, flavour)
        for t in c.produces():
            if id(t) in needed and id(t) not in raw:
                writable[id(t)] = t
        for layer in c.layers:
            for t in layer.inputs:
                if id(t) in raw or id(top(t)) in raw:
                    refused.add(id(top(t)))
    def chosen() -> dict[int, str]:
        storage: dict[int, str] = {}
        for tid, t in writable.items():
            views = members.get(tid, [t])
            if (tid in fixed or tid in refused or tid not in wanted or t.dtype != "float32" or id(t) not in needed
                    or any(id(v) in fixed for v in views)):
                continue
            for v in views:
                storage[id(v)] = dtype
        return storage

    # A Cluster that only moves or selects values (concat, max pool, relu...) and stores its results in the reduced
    # type would round what it reads to the same values whether its input was rounded before or not: its input is
    # wanted too, which halves its producer's writes and its own reads (SqueezeNet's expand convs into their concat,
    # a stem conv into its max pool). Repeated until nothing changes (chains of such Clusters).
    movers = [c for c in programs.main if not c.alias and c.dnn is None and _rounding_commutes(c)]
    storage = chosen()
    while True:
        more = {id(top(t)) for c in movers for layer in c.layers for t in layer.inputs
                if all(id(o) in storage or id(o) not in needed for o in c.produces())} - wanted
        if not more:
            return storage
        wanted |= more
        storage = chosen()


#: ops whose result, rounded to a reduced type, equals the op of the rounded input: they copy or select elements,
#: or are monotonic and exact on representable values (relu, clamp to representable bounds... max of equal roundings)
COMMUTING_OPS = frozenset({"concat", "max_pool", "adaptive_max_pool", "permute", "slice", "pad", "split",
                           "channel_shuffle", "identity", "expand", "relu"})


def _rounding_commutes(c: Cluster) -> bool:
    return all(layer.op in COMMUTING_OPS for layer in c.layers) and c.pool is None


def _raw_accesses(c: Cluster, programs: Programs, needed: set[int], flavour: object) -> set[int]:
    """Ids of the tensors the generated code of ``c`` indexes through raw pointers (see the module docstring)."""
    from .kernels import KernelContext
    from .source import cluster_nodes  # the source generator renders the Cluster the same way later

    kc = KernelContext(flavour, _Names(), programs.layouts)  # type: ignore[arg-type]
    cluster_nodes(c, kc, needed)
    return kc.raw
