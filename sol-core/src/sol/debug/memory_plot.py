"""Live workspace memory over the schedule of one planned graph, as data and as a plot.

The data come from the memory planner itself (`MemoryPlan.lifetimes`: each
workspace tensor's first and last cluster, and `MemoryPlan.storage`: its
offset in the arena), so the plot shows what the generated code does: at
every forward cluster, the bytes of the tensors alive then ("live") and the
highest arena address they occupy ("arena in use"). The top of the latter
is the planner's reported peak (the arena size); the gap between the two
lines is what best-fit placement loses to fragmentation.

A training step compiles its forward and backward graphs separately, so each
gets its own plot, named after its graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..codegen.memory import Affine
from ..codegen.plan import Plan
from ..errors import SolError
from ..ir import Tensor


@dataclass(frozen=True)
class MemoryTimeline:
    model: str
    #: the batch size the affine (a*N + c) sizes are evaluated at
    batch: int
    #: one label per forward cluster (alias clusters included: they run no code and change nothing)
    steps: list[str]
    live_bytes: list[int]
    arena_bytes: list[int]
    #: the planner's workspace size (its reported peak) at ``batch``
    planned_peak: int
    #: bytes of derived parameters (allocated once, not part of the workspace)
    derived_bytes: int

    @property
    def peak(self) -> int:
        return max(self.arena_bytes, default=0)


def timeline(the_plan: Plan, batch: int = 1) -> MemoryTimeline:
    memory = the_plan.memory
    clusters = the_plan.programs.main
    live = [0] * len(clusters)
    arena = [0] * len(clusters)
    for tid, (tensor, first, last) in memory.lifetimes.items():
        size = _size(tensor, batch, the_plan.programs.storage.get(tid))
        end = memory.storage[tid].offset.at(batch) + size
        for step in range(first, last + 1):
            live[step] += size
            arena[step] = max(arena[step], end)
    steps = [("alias " if c.alias else "") + c.anchor.name for c in clusters]
    return MemoryTimeline(the_plan.graph.name, batch, steps, live, arena, memory.workspace.at(batch),
                          memory.derived_bytes)


def _size(tensor: Tensor, batch: int, stored: str | None = None) -> int:
    return Affine.of(tensor, stored).at(batch)


def _pyplot():  # type: ignore[no-untyped-def]
    try:
        import matplotlib
    except ImportError:
        raise SolError("the memory plot (compiler::debug_memory_consumption) needs matplotlib: "
                       "`pip install sol-core[debug]`") from None
    matplotlib.use("Agg", force=False)  # files only: never open a window, work without a display
    import matplotlib.pyplot as plt

    return plt


def plot(data: MemoryTimeline, path: Path) -> Path:
    """Write the plot of ``data`` to ``path`` (the format follows the suffix, e.g. .png or .svg)."""
    plt = _pyplot()
    mib = 1024.0 * 1024.0
    steps = list(range(len(data.steps)))
    figure, axes = plt.subplots(figsize=(max(6.0, min(0.18 * len(steps), 24.0)), 4.0))
    try:
        axes.step(steps, [b / mib for b in data.arena_bytes], where="mid", label="arena in use")
        axes.fill_between(steps, [b / mib for b in data.live_bytes], step="mid", alpha=0.4, label="live tensors")
        axes.axhline(data.planned_peak / mib, color="red", linestyle="--",
                     label=f"planned peak {data.planned_peak / mib:.2f} MiB")
        axes.set_xlabel("forward cluster (schedule order)")
        axes.set_ylabel("workspace MiB")
        axes.set_title(f"SOL {data.model}: workspace memory over the schedule\n(batch {data.batch}; "
                       f"derived parameters: {data.derived_bytes / mib:.2f} MiB more)", fontsize=9)
        if len(steps) <= 80:  # beyond that the names are unreadable anyway
            axes.set_xticks(steps, data.steps, rotation=90, fontsize=6)
        # outside the axes: inside, it would hide the peak it explains
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
    finally:
        plt.close(figure)
    return path
