"""Planning, part 2: where every materialised tensor lives, and workspace reuse.

Storage kinds: model inputs, parameters and outputs are the framework's own
buffers (pointers passed in); constants are static arrays in the source;
derived parameters (results of the prepare program) live in an area the
CompiledModel owns; every other materialised tensor gets an offset in one
workspace arena.

Workspace sizes may be affine in the batch: a*N + c bytes. Tensors are
placed greedily (best fit, in schedule order) into slots freed by tensors
whose last reader has run; a slot's size is (max a)*N + (max c) over its
tenants, so every offset is affine in N and generated code computes it from
the runtime batch. The arena size is the reported peak.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import sympy

from ..errors import SolUnsupportedError
from ..ir import BATCH, Tensor
from .cluster import Programs

ALIGN = 64


@dataclass(frozen=True)
class Affine:
    """a*N + c bytes."""

    a: int = 0
    c: int = 0

    def __add__(self, other: Affine) -> Affine:
        return Affine(self.a + other.a, self.c + other.c)

    def join(self, other: Affine) -> Affine:
        """The smallest size that holds both."""
        return Affine(max(self.a, other.a), max(self.c, other.c))

    def covers(self, other: Affine) -> bool:
        return self.a >= other.a and self.c >= other.c

    def at(self, batch: int) -> int:
        return self.a * batch + self.c

    def c_expr(self) -> str:
        if self.a == 0:
            return f"INT64_C({self.c})"
        return f"(INT64_C({self.a}) * N + INT64_C({self.c}))"

    @staticmethod
    def of(tensor: Tensor, dtype: str | None = None) -> Affine:
        """The bytes of ``tensor`` stored as ``dtype`` (default: its own)."""
        numel = sympy.expand(sympy.sympify(tensor.numel)) * np.dtype(_np_dtype(dtype or tensor.dtype)).itemsize
        poly = sympy.Poly(numel, BATCH)
        if poly.degree() > 1:
            raise SolUnsupportedError(f"tensor {tensor.name} has a size ({tensor.numel}) that is not affine in the batch")
        a = int(poly.coeff_monomial(BATCH)) if poly.degree() == 1 else 0
        c = int(poly.coeff_monomial(1))
        return Affine(_round(a), _round(c))


def _np_dtype(dtype: str) -> str:
    return "uint16" if dtype == "bfloat16" else dtype


def _round(value: int) -> int:
    return (value + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Storage:
    kind: str  # input | param | output | const | derived | workspace
    index: int = 0  # input/param/output position
    offset: Affine = Affine()  # derived/workspace byte offset


@dataclass
class MemoryPlan:
    storage: dict[int, Storage] = field(default_factory=dict)
    #: tensor id -> the tensor whose storage it shares (reshape aliases), resolved to the root
    alias: dict[int, Tensor] = field(default_factory=dict)
    workspace: Affine = Affine()
    derived_bytes: int = 0
    #: sum of every workspace tensor's size without reuse (to report the saving)
    unshared: Affine = Affine()
    slots: list[Affine] = field(default_factory=list)
    #: workspace tensor id -> (tensor, first, last main-cluster index it is live at); what the memory plot draws
    lifetimes: dict[int, tuple[Tensor, int, int]] = field(default_factory=dict)

    def root(self, tensor: Tensor) -> Tensor:
        return self.alias.get(id(tensor), tensor)

    def of(self, tensor: Tensor) -> Storage | None:
        return self.storage.get(id(self.root(tensor)))


def materialised(programs: Programs) -> set[int]:
    """Tensors that need memory: read outside the cluster that made them, or model outputs."""
    owner: dict[int, int] = {}
    for index, c in enumerate([*programs.prepare, *programs.main]):
        for t in c.produces():
            owner[id(t)] = index
    needed = {id(t) for t in programs.outputs}
    for index, c in enumerate([*programs.prepare, *programs.main]):
        for layer in c.layers:
            for t in layer.inputs:
                if owner.get(id(t), -1) != index or c.alias:
                    needed.add(id(t))
    return needed


def plan_memory(programs: Programs, inputs: Sequence[Tensor], params: Sequence[Tensor]) -> MemoryPlan:
    plan = MemoryPlan()
    for i, t in enumerate(inputs):
        plan.storage[id(t)] = Storage("input", i)
    for i, t in enumerate(params):
        plan.storage[id(t)] = Storage("param", i)
    for i, t in enumerate(programs.outputs):
        plan.storage[id(t)] = Storage("output", i)
    for c in [*programs.prepare, *programs.main]:
        if c.alias:
            src, dst = c.anchor.inputs[0], c.anchor.outputs[0]
            plan.alias[id(dst)] = plan.root(src)
    needed = materialised(programs)

    # derived parameters: static sizes, computed once per parameter change; no reuse needed
    offset = 0
    for c in programs.prepare:
        if c.alias:
            continue
        for t in c.produces():
            if id(t) in needed and id(t) not in plan.storage:
                plan.storage[id(t)] = Storage("derived", offset=Affine(0, offset))
                offset += Affine.of(t).at(0)
    plan.derived_bytes = offset

    # workspace: liveness over the main schedule, best-fit slot reuse
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    tensors: dict[int, Tensor] = {}
    for index, c in enumerate(programs.main):
        if not c.alias:
            for t in c.produces():
                if id(t) in needed and id(t) not in plan.storage:
                    first[id(t)] = index
                    last[id(t)] = index
                    tensors[id(t)] = t
        for layer in c.layers:
            for t in layer.inputs:
                root = plan.root(t)
                if id(root) in last:
                    last[id(root)] = max(last[id(root)], index)
    slot_of: dict[int, int] = {}
    slot_free_after: list[int] = []
    for tid in sorted(first, key=lambda k: first[k]):
        size = Affine.of(tensors[tid], programs.storage.get(tid))
        plan.unshared = plan.unshared + size
        free = [s for s, busy_until in enumerate(slot_free_after) if busy_until < first[tid]]
        covering = [s for s in free if plan.slots[s].covers(size)]
        if covering:  # best fit: the smallest slot that already holds it
            slot = min(covering, key=lambda s: (plan.slots[s].a, plan.slots[s].c))
        elif free:  # else grow the largest free slot (least growth)
            slot = max(free, key=lambda s: (plan.slots[s].a, plan.slots[s].c))
        else:
            slot = len(plan.slots)
            plan.slots.append(Affine())
            slot_free_after.append(-1)
        plan.slots[slot] = plan.slots[slot].join(size)
        slot_free_after[slot] = last[tid]
        slot_of[tid] = slot
        plan.lifetimes[tid] = (tensors[tid], first[tid], last[tid])
    starts: list[Affine] = []
    total = Affine()
    for size in plan.slots:
        starts.append(total)
        total = total + size
    plan.workspace = total
    for tid, slot in slot_of.items():
        plan.storage[tid] = Storage("workspace", offset=starts[slot])
    return plan

