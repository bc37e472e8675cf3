"""The deployment driver: ``sol.deploy`` builds a standalone C library (and its header) from a model.

The network runs inside the user's own C/C++ application with no Python,
framework or SOL at run time. The pipeline is ``sol.optimize``'s (frontend
parse -> passes -> plan -> codegen through the target's flavour), then
`sol.codegen.standalone` adds the weights and the C API, and
`sol.codegen.standalone_build` compiles with the toolchain a backend
describes in a `sol.records.DeployTarget` (hook ``sol_deploy_targets``), so
this module knows no device type by name.
"""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sympy

from . import log
from .codegen.flavour import Flavour
from .codegen.plan import plan
from .codegen.standalone import ApiTensor, sources
from .codegen.standalone_build import build_library, check_link
from .errors import SolDeviceError, SolError, SolInputError
from .inputs import InputSpec
from .inputs import input as input_spec
from .ir import Graph, solve_batch
from .records import DeployTarget, Device

_log = log.get("deploy")

TARGETS = {"lib::shared": "shared", "lib::static": "static"}
#: options every target accepts (the target adds its own, e.g. gcc::march)
CORE_OPTIONS = {"weights": "embedded"}
WEIGHTS_MODES = ("embedded", "file")
#: the original SOL's ``dargs`` keys and the keyword each one stands for
DARGS = {"lib_name": "lib_name", "func_name": "func_name", "path": "path", "device_type": "device",
         "host_type": "host_device", "device_idx": None}


@dataclass(frozen=True)
class DeployResult:
    """What ``sol.deploy`` built and how to use it (also printed by ``sol.deploy``)."""

    library: Path
    header: Path
    #: the separate weights file (``options={"weights": "file"}``), else None: the weights are embedded
    weights: Path | None
    kind: str  # "shared" | "static"
    device_type: str
    func_name: str
    inputs: tuple[ApiTensor, ...]
    outputs: tuple[ApiTensor, ...]
    #: the global symbols the library defines: exactly the API
    symbols: tuple[str, ...]
    #: what the application's link line needs (the library itself included)
    link_flags: tuple[str, ...]
    #: shared: the libraries it loads at run time (DT_NEEDED); static: the ones the application links
    runtime_libraries: tuple[str, ...]
    #: the compiler flags the library's code was built with
    compile_flags: tuple[str, ...]
    #: how the target's libraries are handled (linked statically, shipped beside, or avoided)
    notes: tuple[str, ...]
    #: shared libraries copied beside the library, to be shipped with it
    shipped: tuple[Path, ...] = ()

    @property
    def size(self) -> int:
        """Bytes of the library plus its weights file."""
        return self.library.stat().st_size + (self.weights.stat().st_size if self.weights else 0)

    def summary(self) -> str:
        lines = [f"sol.deploy: {self.kind} library for {self.device_type} ({' '.join(self.compile_flags)})",
                 f"  library:  {self.library} ({self.library.stat().st_size / 2**20:.1f} MiB)",
                 f"  header:   {self.header}"]
        if self.weights is not None:
            lines.append(f"  weights:  {self.weights} (ship it beside the library, or set "
                         f"{self.func_name.upper()}_WEIGHTS to its path)")
        if self.shipped:
            lines.append(f"  ship:     {', '.join(str(p) for p in self.shipped)} (beside the library)")
        lines.append(f"  API:      {', '.join(self.symbols)}")
        lines.append(f"  link:     {' '.join(self.link_flags)}")
        what = "needs at run time" if self.kind == "shared" else "needs when linking"
        lines.append(f"  {what}: {', '.join(self.runtime_libraries) or 'nothing beyond libc'}")
        lines.extend(f"  note:     {note}" for note in self.notes)
        return "\n".join(lines)


def deploy(model: Any, *inputs: Any, target: str = "lib::shared", lib_name: str = "libsolpredict",
           func_name: str = "sol_predict", path: str | Path = ".", device: Any = None, host_device: Any = None,
           options: Mapping[str, Any] | None = None, dargs: Mapping[str, Any] | None = None) -> DeployResult:
    """Build ``model`` into a standalone library plus header under ``path`` (see `sol.deploy`)."""
    settings: dict[str, Any] = {"lib_name": lib_name, "func_name": func_name, "path": path, "device": device,
                                "host_device": host_device}
    settings.update(_from_dargs(dargs or {}))
    kind = _kind(target)
    device_type = _device_type(settings["device"], "device") if settings["device"] is not None else _host_type()
    deploy_target = target_for(device_type)
    _check_host(settings["host_device"], device_type)
    opts = _options(deploy_target, options or {})
    # A target may build only some kinds with the toolchain at hand (the VE's clang builds objects, not
    # shared libraries): it says so before anything is generated.
    check_kind = getattr(deploy_target, "check_kind", None)
    if check_kind is not None:
        check_kind(kind, opts)
    lib, func = _lib_name(settings["lib_name"]), _func_name(settings["func_name"])
    out_dir = Path(settings["path"]).expanduser().resolve()

    examples = tuple(_example(value) for value in inputs)
    graph = _parse(model, examples)
    batch = _batch(graph, examples)
    target_options = {key: value for key, value in opts.items() if "::" in key}
    flavour = deploy_target.flavour(target_options)
    if not isinstance(flavour, Flavour):
        raise SolDeviceError(f"deploy target {device_type!r} returned {flavour!r} from flavour(), not a "
                             "sol.codegen.Flavour")
    the_plan = plan(graph, flavour)
    extras = deploy_target.libraries(flavour, target_options)
    out_dir.mkdir(parents=True, exist_ok=True)
    header_path = out_dir / f"{lib}.h"
    library_path = out_dir / (f"{lib}.so" if kind == "shared" else f"{lib}.a")
    weights_name = f"{lib}.weights" if opts["weights"] == "file" else None
    flags = " ".join(deploy_target.option_flags(target_options))
    with tempfile.TemporaryDirectory(prefix=f"sol-deploy-{lib}-") as tmp:
        work = Path(tmp)
        generated = sources(graph, the_plan, flavour, lib_name=lib, func=func,
                            device_type=device_type, kind=kind, flags=flags, weights_file=weights_name,
                            blob_path=work / "weights.bin", batch=batch)
        source = work / f"{lib}.cpp"
        source.write_text(generated.source)
        header_path.write_text(generated.header)
        shutil.copy2(header_path, work / header_path.name)
        if _debug():  # the source is worth reading when something is off; it is big, so only on request
            shutil.copy2(source, out_dir / source.name)
        api = (f"{func}_init", f"{func}_seed", func, "sol_ext_malloc", "sol_ext_free")
        built = build_library(deploy_target, target_options, source, library_path, kind, api, lib, extras)
        if kind == "static":
            check_link(deploy_target, work / header_path.name, built, func)
    weights_path = None
    if weights_name is not None:
        weights_path = out_dir / weights_name
        generated.weights.write_file(weights_path)
    _log.info("deployed model %s for %s into %s (plan: %s)", graph.name, device_type, library_path, the_plan.summary())
    result = DeployResult(library_path, header_path, weights_path, kind, device_type, func, generated.inputs,
                          generated.outputs, built.symbols, built.link_flags, built.runtime_libraries,
                          built.compile_flags, (*deploy_target.notes, *extras.notes), built.shipped)
    print(result.summary())
    return result


def target_for(device_type: str) -> DeployTarget:
    """The installed backend's deploy target for ``device_type``, or an error saying what to install."""
    from .plugins import registry

    targets = registry().deploy_targets
    if device_type in targets:
        return targets[device_type]
    installed = ", ".join(sorted(targets)) or "none"
    if device_type in registry().backends:
        raise SolDeviceError(f"the {device_type} backend is installed but cannot build sol.deploy libraries (it "
                             f"implements no sol_deploy_targets hook); deploy for one of: {installed}")
    raise SolDeviceError(f"sol.deploy has no target for device type {device_type!r} (installed targets: {installed}); "
                         f"install its backend (`pip install sol-backend-{device_type}`) or deploy for one of the "
                         "installed targets")


def _parse(model: Any, examples: Sequence[Any]) -> Graph:
    """The simplified graph of ``model``: a frontend's parse (a Graph is taken as it is) and the passes."""
    if isinstance(model, Graph):
        graph = model
    else:
        from .plugins import registry

        frontends = registry().frontends
        chosen = next((f for f in frontends.values() if f.accepts(model)), None)
        if chosen is None:
            kind = f"{type(model).__module__}.{type(model).__qualname__}"
            raise SolError(f"no SOL frontend accepts a model of type {kind} (installed frontends: "
                           f"{', '.join(sorted(frontends)) or 'none'}). Install the frontend for its framework: "
                           "`pip install sol-frontend-torch` for PyTorch, `pip install sol-frontend-onnx` for ONNX.")
        graph = chosen.parse(model, examples, None)
    from .passes import run_inference_passes

    return run_inference_passes(graph)


def _batch(graph: Graph, examples: Sequence[Any]) -> int:
    """The batch the library is built for: 1 for a fixed-shape graph, else what the examples' shapes say.

    A frontend may parse with a wildcard batch (ONNX models often declare one); the generated code takes the
    batch at run time, so the library calls it with the examples' batch.
    """
    if all(t.is_static for t in (*graph.inputs, *graph.outputs)):
        return 1
    for tensor, example in zip(graph.inputs, examples, strict=False):
        shape = getattr(example, "shape", None)
        if shape is None or len(shape) != tensor.rank:
            continue
        for size, actual in zip(tensor.shape, shape, strict=True):
            if sympy.sympify(size).free_symbols:
                batch = solve_batch(sympy.sympify(size), int(actual))
                if batch is not None:
                    return batch
    wild = next(t for t in (*graph.inputs, *graph.outputs) if not t.is_static)
    raise SolInputError(f"{wild.name!r} has the shape {list(wild.shape)} with a wildcard batch; sol.deploy builds a "
                        "library for fixed shapes: pass example tensors or concrete shapes such as [1, 3, 224, 224]")


def _example(value: Any) -> Any:
    """A shape (``[1, 3, 224, 224]``) becomes a `sol.input` spec; tensors and specs pass through."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(s, int) and not isinstance(s, bool)
                                                         for s in value):
        if any(s <= 0 for s in value):
            raise SolInputError(f"input shape {list(value)}: sol.deploy builds for fixed shapes; every size must be "
                                "positive (no wildcard 0)")
        return input_spec(value)
    if isinstance(value, InputSpec) and value.wildcard_dims:
        raise SolInputError(f"sol.input({list(value.shape)}) has a wildcard batch; sol.deploy builds for fixed "
                            "shapes: give the batch size")
    return value


def _from_dargs(dargs: Mapping[str, Any]) -> dict[str, Any]:
    unknown = [key for key in dargs if key not in DARGS]
    if unknown:
        raise SolInputError(f"unknown dargs key(s) {', '.join(map(repr, unknown))}; valid: {', '.join(DARGS)}")
    # device_idx is accepted for compatibility: a host-CPU library runs on whichever CPU loads it
    return {keyword: value for key, value in dargs.items() if (keyword := DARGS[key]) is not None}


def _kind(target: str) -> str:
    if target not in TARGETS:
        raise SolInputError(f"unknown deploy target {target!r}; use one of {', '.join(TARGETS)}")
    return TARGETS[target]


def _device_type(device: Any, argument: str) -> str:
    """``"x86"``, ``"arm64:0"``, ``sol.device.x86`` or a `Device` -> the device type name."""
    if isinstance(device, Device):
        return device.type
    text = str(device) if device is not None else ""
    name = text.partition(":")[0].strip().lower()
    if not name:
        raise SolInputError(f"sol.deploy: {argument} must name a device type such as 'x86' or 'arm64', got {device!r}")
    return name


def _host_type() -> str:
    """This machine's CPU type: the first host backend (`Backend.host`) that sees a device."""
    from .compiler import host_types
    from .devices import host_device

    host = host_device()
    if host is not None:
        return host.type
    raise SolDeviceError(f"sol.deploy: no host CPU backend sees this machine's CPU (installed host backends: "
                         f"{', '.join(host_types()) or 'none'}); install the one for this CPU (sol-backend-x86, "
                         "sol-backend-arm64) or name the target with device=")


def _check_host(host_device: Any, device_type: str) -> None:
    # Host CPU targets run everything on the device itself; offload targets (CUDA, VE) will name their hosts.
    if host_device is None:
        return
    host = _device_type(host_device, "host_device")
    if host != device_type:
        raise SolDeviceError(f"sol.deploy for {device_type} builds a library that runs on the {device_type} CPU "
                             f"itself; host_device must be None or {device_type!r}, got {host!r}")


def _options(target: DeployTarget, given: Mapping[str, Any]) -> dict[str, str]:
    known = {**CORE_OPTIONS, **target.options}
    unknown = [key for key in given if key not in known]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, list(known), n=2)
            hints.append(f"{key!r}" + (f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""))
        raise SolInputError(f"unknown sol.deploy option {', '.join(hints)} for {target.device_type}; valid options: "
                            f"{', '.join(f'{k} (default {v!r})' for k, v in known.items())}")
    merged = {**known, **{key: str(value) for key, value in given.items()}}
    if merged["weights"] not in WEIGHTS_MODES:
        raise SolInputError(f"option weights={merged['weights']!r}: use one of {', '.join(WEIGHTS_MODES)}")
    return merged


def _lib_name(name: Any) -> str:
    text = str(name)
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", text):
        raise SolInputError(f"lib_name {text!r} must be a plain file name (letters, digits, _ . + -), e.g. "
                            "'libsolpredict'")
    return text


def _func_name(name: Any) -> str:
    text = str(name)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise SolInputError(f"func_name {text!r} must be a C identifier, e.g. 'sol_predict'")
    return text


def _debug() -> bool:
    import sol

    return bool(sol.config["compiler::debug"])
