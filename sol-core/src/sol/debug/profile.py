"""``sol.profile``: per-Cluster times of one optimized model as data, a table, or a chrome trace.

Times come from the counters a model built with ``compiler::profile`` (or
``compiler::debug``) keeps in its generated code (`CompiledModel.profile`):
wall time (CLOCK_MONOTONIC), summed over calls. A profile is the
difference of the counters around the profiled calls, divided by the number
of calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SolError
from .table import ClusterTime, format_table, records


@dataclass
class Profile:
    """The per-Cluster times of one model, averaged over ``runs`` calls."""

    model: str
    device: str
    runs: int
    clusters: list[ClusterTime] = field(default_factory=list)
    #: per call, for a model offloaded to a device with its own memory: copies and bytes each way, launches
    transfers: dict[str, float] | None = None

    @property
    def total_seconds(self) -> float:
        return sum(c.seconds for c in self.clusters)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "runs": self.runs, "total_seconds": self.total_seconds,
                "clusters": [c.to_dict() for c in self.clusters], "transfers": self.transfers}

    def chrome_trace(self) -> dict[str, Any]:
        """The clusters one after another as complete ("X") events of one thread (Perfetto, chrome://tracing)."""
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"SOL {self.model}"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": self.device}},
        ]
        start_us = 0.0
        for c in self.clusters:
            duration_us = c.seconds * 1e6
            events.append({"ph": "X", "name": f"#{c.index} {c.name}", "cat": c.module, "pid": 1, "tid": 1,
                           "ts": start_us, "dur": duration_us,
                           "args": {"layers": list(c.layers), "ops": list(c.ops), "share": c.share}})
            start_us += duration_us
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"model": self.model, "device": self.device, "runs": self.runs}}

    def save_chrome_trace(self, path: str | Path) -> Path:
        """Write the chrome-trace JSON (open it in https://ui.perfetto.dev); returns the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.chrome_trace(), indent=1))
        return target

    def __str__(self) -> str:
        per = "per call" if self.runs == 1 else f"average of {self.runs} calls"
        text = format_table(self.clusters, f"SOL profile of {self.model} on {self.device} ({per})")
        if self.transfers is not None:
            t = self.transfers
            text += (f"\ncopies per call: {t['to_device']:g} to the device ({t['to_device_bytes']:.0f} B), "
                     f"{t['to_host']:g} back ({t['to_host_bytes']:.0f} B), {t['parameters']:g} parameter uploads "
                     f"({t['parameter_bytes']:.0f} B), {t['launches']:g} launches")
        return text


def compiled_model_of(model: Any) -> Any:
    """The CompiledModel behind an optimized model (PyTorch SolModule, ONNX OnnxModel) or the CompiledModel itself."""
    from ..runtime import CompiledModel

    if isinstance(model, CompiledModel):
        return model
    compiled = getattr(model, "compiled", None)
    if isinstance(compiled, CompiledModel):
        return compiled
    raise SolError(f"sol.profile takes a model returned by sol.optimize (or a CompiledModel), not a "
                   f"{type(model).__module__}.{type(model).__qualname__}")


def totals(compiled: Any) -> list[tuple[str, float]]:
    """The model's cumulative per-Cluster seconds, or a SolError saying how to build it with profiling."""
    if compiled.library.profile is None:
        raise SolError(f"model {compiled.graph.name!r} was built without per-Cluster timers; set "
                       "sol.config['compiler::profile'] = True (or 'compiler::debug') before sol.optimize")
    return list(compiled.profile())


def difference(compiled: Any, before: list[tuple[str, float]], runs: int = 1) -> list[ClusterTime]:
    """Records of the time spent since ``before`` (a `totals` result), per call over ``runs`` calls."""
    after = totals(compiled)
    spent = [(a - b) / max(runs, 1) for (_, a), (_, b) in zip(after, before, strict=True)]
    return records([title for title, _ in after], spent)


def device_name(compiled: Any) -> str:
    if getattr(compiled, "device", None) is not None:  # an offloaded model knows its Device
        return str(compiled.device)
    flavour = compiled.metadata.get("flavour", "x86") if hasattr(compiled, "metadata") else "x86"
    return f"{flavour}:{getattr(compiled, 'device_index', 0)}"


def profile(model: Any, *inputs: Any, runs: int = 1, warmup: int = 0) -> Profile:
    """Call ``model(*inputs)`` ``warmup`` + ``runs`` times; the per-Cluster times of the timed calls, averaged."""
    if runs < 1 or warmup < 0:
        raise SolError(f"sol.profile needs runs >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    compiled = compiled_model_of(model)
    if not callable(model):
        raise SolError("sol.profile calls the model: pass the model sol.optimize returned, not its CompiledModel")
    totals(compiled)  # fail before running when the model has no timers
    for _ in range(warmup):
        model(*inputs)
    before = totals(compiled)
    stats = getattr(compiled, "transfers", None)
    moved = stats.copy() if stats is not None else None
    for _ in range(runs):
        model(*inputs)
    transfers = None
    if stats is not None and moved is not None:
        spent = stats.since(moved)
        transfers = {name: value / runs for name, value in vars(spent).items() if name != "calls"}
    return Profile(compiled.graph.name, device_name(compiled), runs, difference(compiled, before, runs), transfers)
