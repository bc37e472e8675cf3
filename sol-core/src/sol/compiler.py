"""The pipeline: parse -> passes -> plan -> codegen -> build -> cache -> CompiledModel.

Each stage is a plain function of the previous stage's output:
`sol.codegen.plan` (clusters, memory), `sol.codegen.source.generate` (C++
through the flavour's templates), `sol.codegen.build.build` (the toolchain),
`sol.cache.get_or_build` (the artifact under a key of everything that
affects it), `sol.runtime.CompiledModel` (ctypes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import cache, graph_cache, log
from . import precision as precisions
from ._version import __version__
from .codegen import CpuFlavour, Flavour, cexpr
from .codegen.build import SOURCE_NAME, build
from .codegen.plan import Plan, plan
from .debug import artifacts as debug_artifacts
from .debug import progress
from .errors import SolDeviceError, SolError
from .ir import Graph
from .records import Device, Frontend
from .runtime import CompiledModel
from .runtime.offload import OffloadedModel, device_runtime

_log = log.get("compiler")

#: Bump when generated code changes for the same graph (part of the cache key).
CODEGEN_VERSION = "26"


def host_types() -> tuple[str, ...]:
    """The installed host CPU types: backends that declare ``host`` (their code runs on the framework's tensors)."""
    from .plugins import registry

    return tuple(sorted(name for name, backend in registry().backends.items() if backend.host))


def flavour_for(device: Device | str | None) -> tuple[Flavour, int]:
    """The code generation flavour and the device index for ``device`` (None: the host CPU)."""
    if device is None:
        # the device chosen with sol.device.set (else the default one)
        from .devices import default_device

        device = default_device()
        if device is None:
            return CpuFlavour(), 0  # no backend sees a device: sol-core's generic flavour for this CPU
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        dtype, dindex = kind, int(index or 0)
    else:
        dtype, dindex = device.type, device.index
    from .plugins import registry

    backend = registry().backends.get(dtype)
    flavour = backend.flavour() if backend is not None else None  # a backend may supply (or extend) its flavour
    if flavour is not None:
        if not isinstance(flavour, Flavour):
            raise SolDeviceError(f"backend {dtype!r} returned {flavour!r} from flavour(), not a sol.codegen.Flavour")
        return flavour, dindex
    if backend is not None and backend.host:
        return CpuFlavour(dtype), dindex
    if backend is not None:
        raise SolDeviceError(f"backend {dtype!r} has no code generation flavour: its flavour() returned None and it "
                             "is not a host CPU type (Backend.host)")
    installed = ", ".join(sorted(registry().backends)) or "none"
    raise SolDeviceError(f"no code generation flavour for device type {dtype!r}: install its backend package "
                         f"(sol-backend-{dtype}); the installed backends are {installed}")


def _resolve_device(device: Device | str | None) -> Device | None:
    """The Device record a model is compiled for (None: no backend sees any device; the host flavour is used)."""
    from .devices import default_device, get_device

    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind in host_types():  # host code needs no device record (arm64 code is built and tested without one)
            return None
        return get_device(kind, int(index or 0))
    return default_device()


def model_prefix(graph: Graph) -> str:
    """Prefix of the exported C functions (one library per model, so the name only needs to be readable)."""
    return "sol_" + (cexpr.identifier(graph.name).strip("_").lower() or "model")


def cache_key(graph: Graph, flavour: Flavour) -> str:
    """Everything that decides the artifact: graph structure, shapes, dtypes, flavour, toolchain, flags, versions."""
    parts = {
        "sol": __version__,
        "codegen": CODEGEN_VERSION,
        "graph": graph.structural_hash(),
        "prefix": model_prefix(graph),
        "flavour": type(flavour).__module__ + "." + type(flavour).__qualname__,
        "toolchain": flavour.toolchain_id(),
        "dnn": flavour.dnn.key() if flavour.dnn is not None else "",
        "profile": _profiling(),
    }
    if flavour.precision != "fp32":  # absent for fp32, so fp32 artifacts keep the keys they had before precisions
        parts["precision"] = flavour.precision
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def generate_source(graph: Graph, flavour: Flavour | None = None) -> str:
    """The C++ source of a graph (no passes, no build): for inspection and tests."""
    from .codegen.source import generate

    flavour = flavour or CpuFlavour()
    the_plan = plan(graph, flavour)
    return generate(graph, the_plan.programs, the_plan.memory, flavour, model_prefix(graph))


def compile_graph(graph: Graph, device: Device | str | None = None, *, passes: bool = True,
                  precision: str = "fp32") -> CompiledModel:
    """Optimise, generate, build (or fetch from the cache) and load a graph.

    ``precision``: what the model computes in (`sol.precision`; fp32 unless asked, so training variants and other
    internal compiles never pick up ``compiler::precision``); the result's ``precision`` is the resolved one.
    """
    with progress.compiling(graph.name):
        return _compile_graph(graph, device, passes, precision)


def precise_flavour(device: Device | str | None, precision: str | None) -> tuple[Flavour, int]:
    """`flavour_for` set up for ``precision`` (None: ``compiler::precision``; "auto" resolved for the device)."""
    flavour, index = flavour_for(device)
    where = str(device) if device is not None else f"{flavour.name}:{index}"
    flavour.use_precision(precisions.resolve(precision, flavour, where))
    return flavour, index


def _compile_graph(graph: Graph, device: Device | str | None, passes: bool, precision: str) -> CompiledModel:
    if passes:
        progress.stage("passes")
        graph = _run_passes(graph)
    flavour, index = precise_flavour(device, precision)
    key = cache_key(graph, flavour)
    prefix = model_prefix(graph)

    planned: list[Plan] = []

    def plan_once() -> Plan:  # a cache hit needs no plan, unless debug mode draws it
        if not planned:
            progress.stage("plan")
            planned.append(plan(graph, flavour))
        return planned[0]

    def build_into(directory: Path) -> Mapping[str, Any]:
        # the generator imports every kernel (and so the op registry): loading a cached model does not need it
        from .codegen.source import generate

        the_plan = plan_once()
        progress.stage("codegen")
        source = generate(graph, the_plan.programs, the_plan.memory, flavour, prefix, _profiling())
        progress.stage("build")
        build(source, flavour, directory, graph.name)
        return {
            "model": graph.name,
            "prefix": prefix,
            "flavour": flavour.name,
            "plan": the_plan.summary(),
            "workspace": [the_plan.memory.workspace.a, the_plan.memory.workspace.c],
            "derived_bytes": the_plan.memory.derived_bytes,
            "clusters": [c.title() for c in the_plan.programs.main if not c.alias],
            "output_layouts": _free_output_layouts(graph, the_plan),
            "profiled": _profiling(),
        }

    entry = cache.get_or_build(key, build_into)
    library = entry.file(SOURCE_NAME + flavour.library_suffix)
    _log.debug("model %s: %s", graph.name, entry.metadata.get("plan", ""))
    target = _resolve_device(device)
    runtime = device_runtime(target) if target is not None else None
    if runtime is not None and target is not None:  # a device with its own memory: offloaded (sol.runtime.offload)
        compiled: CompiledModel = OffloadedModel(graph, library, prefix, runtime, target, metadata=dict(entry.metadata))
    else:
        compiled = CompiledModel(graph, library, prefix, device=index)
    compiled.source_path = entry.file(SOURCE_NAME + flavour.source_suffix)  # type: ignore[attr-defined]
    compiled.metadata = dict(entry.metadata)  # type: ignore[attr-defined]
    compiled.precision = flavour.precision  # type: ignore[attr-defined]
    if debug_artifacts.wanted():
        compiled.debug_artifacts = debug_artifacts.write(plan_once(), compiled, f"{flavour.name}:{index}")  # type: ignore[attr-defined]
    return compiled


def _free_output_layouts(graph: Graph, the_plan: Plan) -> dict[str, list[int]]:
    """Output position -> memory order, for the free-layout outputs the plan left non-plain."""
    layouts = the_plan.programs.layouts
    out = {}
    for i in sorted(graph.free_layout_outputs):
        order = layouts.get(id(the_plan.programs.outputs[i]))
        if order is not None:
            out[str(i)] = list(order)
    return out


def _profiling() -> bool:
    import sol

    # debug mode prints per-Cluster times, so it needs the same timers
    return bool(sol.config["compiler::profile"]) or bool(sol.config["compiler::debug"])


def _run_passes(graph: Graph) -> Graph:
    try:
        from .passes import run_inference_passes
    except ImportError:  # passes are optional for the pipeline; codegen handles unsimplified graphs
        return graph
    return run_inference_passes(graph)


def optimize(model: Any, *inputs: Any, batch_size: int | None = None, device: Device | str | None = None,
             precision: str | None = None) -> Any:
    """Extract ``model`` with the frontend that accepts it, compile it, and wrap the result in a framework model.

    ``precision``: "fp32", "bf16", "fp16" or "auto" (`sol.precision`); None: ``sol.config["compiler::precision"]``.

    A model optimized before (same fingerprint, see `sol.graph_cache`) skips
    the frontend's capture and the passes: its optimized graph is loaded.
    """
    from .plugins import registry

    wanted = precisions.requested(precision)  # a bad value fails before any capture
    frontends = registry().frontends
    for frontend in frontends.values():
        if frontend.accepts(model):
            return _optimize_with(frontend, model, inputs, batch_size, device, wanted)
    kind = f"{type(model).__module__}.{type(model).__qualname__}"
    installed = ", ".join(sorted(frontends)) or "none"
    raise SolError(f"no SOL frontend accepts a model of type {kind} (installed frontends: {installed}). "
                   "Install the frontend for its framework: `pip install sol-frontend-torch` for PyTorch, "
                   "`pip install sol-frontend-onnx` for ONNX.")


def _optimize_with(frontend: Frontend, model: Any, inputs: tuple[Any, ...], batch_size: int | None,
                   device: Device | str | None, precision: str = "fp32") -> Any:
    with progress.compiling(type(model).__name__):
        return _optimize_in_progress(frontend, model, inputs, batch_size, device, precision)


def _optimize_in_progress(frontend: Frontend, model: Any, inputs: tuple[Any, ...], batch_size: int | None,
                          device: Device | str | None, precision: str = "fp32") -> Any:
    precise_flavour(device, precision)  # a precision the device lacks fails before the capture
    record_key = _record_key(frontend, model, inputs, batch_size, device)
    record = graph_cache.load(record_key) if record_key is not None else None
    if record is not None:
        _log.debug("model %s: parsed graph loaded from the cache (no capture)", record.graph.name)
        frontend.restore(model, inputs, batch_size, record.frontend_state)
        return frontend.wrap(model, compile_graph(record.graph, device, passes=False, precision=precision))
    progress.stage("parse")
    parsed = frontend.parse(model, inputs, batch_size)
    progress.stage("passes")
    graph = _run_passes(parsed)
    compiled = compile_graph(graph, device, passes=False, precision=precision)
    if record_key is not None:
        try:
            graph_cache.store(record_key, graph_cache.ParsedRecord(graph, frontend.parse_state(model)))
        except Exception as exc:  # the record only saves time later: never fail an optimize over it
            _log.debug("model %s: parsed graph not cached: %s", graph.name, exc)
    return frontend.wrap(model, compiled)


def _record_key(frontend: Frontend, model: Any, inputs: tuple[Any, ...], batch_size: int | None,
                device: Device | str | None) -> str | None:
    try:
        fingerprint = frontend.fingerprint(model, inputs, batch_size)
    except Exception as exc:  # a fingerprint is an optimisation; a model it cannot describe is just parsed
        _log.debug("no fingerprint for %s: %s", type(model).__name__, exc)
        return None
    if fingerprint is None:
        return None
    flavour, index = flavour_for(device)
    where = f"{type(flavour).__module__}.{type(flavour).__qualname__}:{flavour.name}:{index}"
    return graph_cache.record_key(f"{frontend.name}:{fingerprint}", where)
