"""The pass driver's budget: no pass may hang `sol.optimize`.

Every pass must terminate by construction (a rewrite may not create its own
next candidate; `elementwise_before_permute` writes its argument down). This
is the guard for a pass that gets that wrong anyway: the driver
(`sol.passes.run_passes`) runs each pass inside `pass_budget`, which allows
`REWRITES_PER_LAYER` rewrites per layer of the graph the pass starts on
(plus `MIN_REWRITES`), and a pass that iterates calls `step` once per rewrite
or round. The step past the budget raises a `SolPassBudgetError` that names
the pass and the model instead of letting the pass run on. Outside the driver
(a pass called on its own, as the tests do) `step` counts nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from ..errors import SolPassBudgetError
from ..ir.graph import Graph

#: rewrites a pass may make per layer of the graph it starts on (the passes here need at most a few)
REWRITES_PER_LAYER = 16
#: rewrites any pass may make, however small the graph
MIN_REWRITES = 256


@dataclass
class _Budget:
    pass_name: str
    model: str
    layers: int
    limit: int
    used: int = 0


_current: ContextVar[_Budget | None] = ContextVar("sol_pass_budget", default=None)


def rewrite_budget(graph: Graph) -> int:
    """The number of rewrites a pass may make on ``graph``: proportional to its size."""
    return REWRITES_PER_LAYER * len(graph.layers) + MIN_REWRITES


@contextlib.contextmanager
def pass_budget(pass_name: str, graph: Graph, limit: int | None = None) -> Iterator[None]:
    """Run the body (one pass over ``graph``) with ``limit`` rewrites (default: `rewrite_budget`)."""
    allowed = rewrite_budget(graph) if limit is None else limit
    token = _current.set(_Budget(pass_name, graph.name, len(graph.layers), allowed))
    try:
        yield
    finally:
        _current.reset(token)


def step(graph: Graph | None = None) -> None:
    """Count one rewrite (or round) of the running pass; raise once it is past its budget."""
    current = _current.get()
    if current is None:
        return
    current.used += 1
    if current.used > current.limit:
        size = len(graph.layers) if graph is not None else current.layers
        raise SolPassBudgetError(
            f"graph pass {current.pass_name!r} did not finish on model {current.model!r}: it exceeded its budget "
            f"of {current.limit} rewrites ({REWRITES_PER_LAYER} per layer of the {current.layers} it started with; "
            f"the graph has {size} now), so it would not have terminated. This is a bug in that pass: please "
            "report it with the model.")
