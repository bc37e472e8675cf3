"""What debug mode writes and prints for every compiled model.

With ``compiler::debug``: a copy of the generated source and the network as
a GraphViz graph (rendered to SVG and PNG when ``dot`` is installed) in
``compiler::debug_dir``, every file named ``<compiler::name>_<model>`` (or
``<model>``); where the generated source lives per device is printed; after
every call the per-Cluster time table is printed. With
``compiler::debug_memory_consumption``: the memory plot, too.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import log
from ..codegen.plan import Plan
from . import graphviz, memory_plot
from .profile import device_name, difference, totals
from .table import format_table

_log = log.get("debug")


@dataclass
class DebugArtifacts:
    """The files debug mode wrote for one compiled model (``None``/empty: not written)."""

    source: Path | None = None
    dot: Path | None = None
    rendered: list[Path] = field(default_factory=list)
    memory_plot: Path | None = None
    memory: memory_plot.MemoryTimeline | None = None


def _config() -> Any:
    import sol

    return sol.config


def debug_enabled() -> bool:
    return bool(_config()["compiler::debug"])


def memory_plot_enabled() -> bool:
    return bool(_config()["compiler::debug_memory_consumption"])


def wanted() -> bool:
    """Whether a compile has anything to write or print here."""
    return debug_enabled() or memory_plot_enabled()


def base_path(model: str) -> Path:
    """``<compiler::debug_dir>/<compiler::name>_<model>`` without suffix (the name part only when set)."""
    config = _config()
    name = str(config["compiler::name"])
    directory = Path(str(config["compiler::debug_dir"]) or ".").expanduser()
    return directory / (f"{name}_{model}" if name else model)


class TimingPrinter:
    """A `CompiledModel.run_listeners` entry: prints the per-Cluster times of each call as a table."""

    def __init__(self, compiled: Any, stream: Any = None) -> None:
        self.compiled = compiled
        self.stream = stream
        self.calls = 0
        self._last = totals(compiled)
        transfers = getattr(compiled, "transfers", None)  # an offloaded model (sol.runtime.offload)
        self._transfers = transfers.copy() if transfers is not None else None

    def __call__(self, compiled: Any) -> None:
        rows = difference(compiled, self._last)
        self._last = totals(compiled)
        self.calls += 1
        title = f"SOL debug: {compiled.graph.name} on {device_name(compiled)}, call {self.calls}"
        text = format_table(rows, title)
        if self._transfers is not None:
            now = compiled.transfers.copy()
            text += f"\ncopies: {now.since(self._transfers)}"
            self._transfers = now
        print(text, file=self.stream or sys.stdout, flush=True)


def write(the_plan: Plan, compiled: Any, device: str) -> DebugArtifacts:
    """Write (and print) the debug artifacts of ``compiled``, planned as ``the_plan``, on ``device``."""
    model = the_plan.graph.name
    base = base_path(model)
    base.parent.mkdir(parents=True, exist_ok=True)
    result = DebugArtifacts()
    if debug_enabled():
        source = Path(getattr(compiled, "source_path", ""))
        if source.is_file():
            result.source = base.with_name(base.name + source.suffix)
            shutil.copyfile(source, result.source)
            print(f"SOL debug: generated source of {model} for {device}: {source} (copy: {result.source})",
                  flush=True)
        result.dot = graphviz.write_dot(the_plan, device, base.with_name(base.name + ".dot"))
        result.rendered = graphviz.render(result.dot)
        print(f"SOL debug: graph of {model}: {', '.join(str(p) for p in [result.dot, *result.rendered])}",
              flush=True)
        if compiled.library.profile is not None:
            compiled.run_listeners.append(TimingPrinter(compiled))
        else:  # a backend whose generated code has no timers: everything else still works
            _log.warning("model %s on %s has no per-Cluster timers; no time table is printed", model, device)
    if memory_plot_enabled():
        result.memory = memory_plot.timeline(the_plan)
        result.memory_plot = memory_plot.plot(result.memory, base.with_name(base.name + "_memory.png"))
        print(f"SOL debug: memory plot of {model}: {result.memory_plot} (peak {result.memory.peak} bytes of "
              f"workspace at batch {result.memory.batch})", flush=True)
    _log.debug("debug artifacts of %s: %s", model, result)
    return result
