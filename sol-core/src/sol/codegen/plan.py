"""The whole plan of one graph: programs, clusters, memory, and the ABI names."""

from __future__ import annotations

from dataclasses import dataclass

from .. import log
from ..ir import Graph
from . import cexpr
from .cluster import Programs, plan_programs
from .flavour import Flavour
from .memory import MemoryPlan, plan_memory
from .storage import plan_storage

_log = log.get("codegen")


@dataclass
class Plan:
    graph: Graph
    programs: Programs
    memory: MemoryPlan
    #: prefix of every exported function (``<prefix>_forward``...)
    prefix: str

    @property
    def param_names(self) -> list[str]:
        return list(self.graph.params)

    def summary(self) -> str:
        ws, unshared = self.memory.workspace, self.memory.unshared
        calls = len([c for c in self.programs.main if c.dnn])
        return (f"{len(self.graph.layers)} layers -> {len([c for c in self.programs.main if not c.alias])} clusters "
                f"({calls} library calls, {len(self.programs.layouts)} tensors not plain"
                f"{self._stored()}) "
                f"(+{len([c for c in self.programs.prepare if not c.alias])} in prepare); workspace peak "
                f"{ws.a}*N + {ws.c} bytes (without reuse {unshared.a}*N + {unshared.c}); "
                f"derived parameters {self.memory.derived_bytes} bytes")


    def _stored(self) -> str:
        kinds = sorted(set(self.programs.storage.values()))
        return f", {len(self.programs.storage)} stored as {'/'.join(kinds)}" if kinds else ""


def plan(graph: Graph, flavour: Flavour | None = None) -> Plan:
    """Clusters, layouts and memory of ``graph``; the flavour's DNN module (if any) takes the library layers."""
    programs = plan_programs(graph, flavour.dnn if flavour is not None else None,
                             flavour.lowers if flavour is not None else None)
    programs.storage = plan_storage(programs, flavour.dnn if flavour is not None else None, graph.inputs,
                                    list(graph.params.values()), flavour)
    memory = plan_memory(programs, graph.inputs, list(graph.params.values()))
    result = Plan(graph, programs, memory, "sol_" + cexpr.identifier(graph.name).strip("_").lower())
    _log.info("plan of %s: %s", graph.name, result.summary())
    return result
