"""Typed records exchanged between sol-core and its plugins.

Plugins return these from their hooks (see `sol.hookspecs`). They are the
whole contract: a plugin never calls anything private of sol-core.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar


@dataclasses.dataclass(frozen=True)
class Device:
    """One device instance, e.g. ``x86:0``.

    ``properties`` holds backend-specific facts (cores, ISA, memory, compute
    capability, ...) as plain JSON-serialisable values.
    """

    type: str
    index: int
    name: str
    backend: str
    properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.type}:{self.index}"

    def __str__(self) -> str:
        return self.id

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "index": self.index,
            "name": self.name,
            "backend": self.backend,
            "properties": dict(self.properties),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Device:
        return cls(
            type=str(data["type"]),
            index=int(data["index"]),
            name=str(data["name"]),
            backend=str(data["backend"]),
            properties=dict(data.get("properties", {})),
        )


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What a backend found when it looked for its devices.

    ``reason`` explains an empty ``devices`` list (e.g. "no /dev/veslot*").
    """

    devices: tuple[Device, ...] = ()
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"devices": [d.to_dict() for d in self.devices], "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeResult:
        return cls(
            devices=tuple(Device.from_dict(d) for d in data.get("devices", [])),
            reason=str(data.get("reason", "")),
        )


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One declared setting: ``sol.config["component::key"]``."""

    name: str
    type: type | tuple[type, ...]
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None

    @property
    def component(self) -> str:
        """The part before ``::``; un-namespaced keys (e.g. "autotuning") belong to the core."""
        return self.name.split("::", 1)[0] if "::" in self.name else "core"


class Backend:
    """A device type and the toolchain that targets it.

    A backend package subclasses this and returns an instance from its
    ``sol_backends`` hook implementation. Only ``name``, ``description`` and
    ``probe`` are required; the rest have working defaults.

    ``probe_timeout``: when not None, sol-core runs ``probe`` in a separate
    process killed after that many seconds, so a hanging or crashing driver
    (CUDA, VE) cannot take the user's process down with it. The subclass must
    then be importable by its module path and constructible without arguments.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    probe_timeout: ClassVar[float | None] = None

    def probe(self) -> ProbeResult:
        """Look for devices of this type; never raise for "none found"."""
        raise NotImplementedError

    def versions(self) -> Mapping[str, str]:
        """Versions of the toolchains and libraries this backend uses."""
        return {}

    def flavour(self) -> Any:
        """The code-generation flavour (a ``sol.codegen.Flavour``) for this device type.

        None (the default) means sol-core's generic flavour for host CPU types;
        a device with its own toolchain returns its own (see the flavours in
        ``sol.codegen.flavours``).
        """
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend {self.name!r}>"


class Frontend:
    """A framework integration (PyTorch, ONNX).

    ``accepts(model)`` tells whether this frontend handles a model object, so
    ``sol.optimize`` can pick the frontend without the user naming it.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: the import name users know, e.g. "pytorch" for ``import sol.pytorch``
    alias: ClassVar[str] = ""

    def accepts(self, model: Any) -> bool:
        raise NotImplementedError

    def parse(self, model: Any, inputs: tuple[Any, ...], batch_size: int | None = None) -> Any:
        """Extract ``model`` into a `sol.ir.Graph` given example inputs / `sol.input` specs."""
        raise NotImplementedError

    def wrap(self, model: Any, compiled: Any) -> Any:
        """Return a framework-native model that runs ``compiled`` (a `sol.runtime` CompiledModel)."""
        raise NotImplementedError

    def versions(self) -> Mapping[str, str]:
        return {}

    # -- optional: skipping the capture of a model optimized before (`sol.graph_cache`) ---------------
    def fingerprint(self, model: Any, inputs: tuple[Any, ...], batch_size: int | None = None) -> str | None:
        """A cheap string that equals another model's exactly when ``parse`` would give the same Graph.

        It must cover everything the graph depends on except parameter values
        (structure, code, attributes, input shapes/dtypes, framework version);
        return None whenever that cannot be established safely, and the model
        is parsed as usual. Default: None (always parse).
        """
        return None

    def parse_state(self, model: Any) -> Any:
        """Picklable state that ``wrap`` needs besides the compiled model (e.g. the output structure)."""
        return None

    def restore(self, model: Any, inputs: tuple[Any, ...], batch_size: int | None, state: Any) -> None:
        """Make ``wrap`` work for ``model`` without ``parse``, from what ``parse_state`` returned earlier."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} frontend {self.name!r}>"


@dataclasses.dataclass(frozen=True)
class DeployLibraries:
    """What a deploy target's generated code links besides itself (e.g. a compute library and its glue).

    ``objects`` are linked into the deployed library (their symbols must be
    hidden); ``shipped`` shared libraries are copied beside it and found
    there at run time (``$ORIGIN``); ``notes`` tell the user about them.
    """

    include_dirs: tuple[Path, ...] = ()
    objects: tuple[Path, ...] = ()
    shipped: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()


class DeployTarget:
    """How ``sol.deploy`` builds a standalone C library for one device type.

    A backend returns instances from its ``sol_deploy_targets`` hook; the
    deploy driver knows nothing device-specific beyond this interface, so a
    new device type deploys without touching sol-core. The methods are called
    at deploy time (never while plugins load), so they may read
    ``sol.config`` and probe the toolchain.

    ``options``: the ``sol.deploy(options=...)`` keys the target accepts and
    their defaults; ``"gcc::<flag>": value`` becomes ``-<flag>=value``
    (``gcc::march`` -> ``-march=...``). ``install_hint``: what to install
    when the compiler is missing. ``notes``: how the libraries the target's
    code needs are provided (linked statically, shipped beside the library,
    or avoided), shown to the user.
    """

    device_type: ClassVar[str] = ""
    description: ClassVar[str] = ""
    install_hint: ClassVar[str] = ""
    options: ClassVar[Mapping[str, str]] = {}
    notes: ClassVar[tuple[str, ...]] = ()

    def compiler(self) -> list[str]:
        """argv of a GCC-compatible C++ compiler (-c, -shared, -fPIC, -fopenmp, -fvisibility)."""
        raise NotImplementedError

    def flags(self) -> list[str]:
        """Compiler flags of every deployed library besides the ``gcc::`` options."""
        return ["-O3", "-fopenmp"]

    def binutils_prefix(self) -> str:
        """Prepended to ar, nm, objcopy and readelf (``"aarch64-linux-gnu-"`` for the cross binutils)."""
        return ""

    def flavour(self, options: Mapping[str, str]) -> Any:
        """The `sol.codegen.Flavour` the library's code is generated with, given the target's options."""
        raise NotImplementedError

    def libraries(self, flavour: Any, options: Mapping[str, str]) -> DeployLibraries:
        """What ``flavour``'s code needs besides its own source (default: nothing, library-free code)."""
        return DeployLibraries()

    def emulator(self) -> list[str] | None:
        """argv prefix that runs a program built for the target on this machine ([]: natively; None: cannot)."""
        return None

    # -- derived, not meant to be overridden ------------------------------------
    def tool(self, name: str) -> str:
        """The binutils program ``name`` (ar, nm, objcopy, readelf) for this target."""
        return self.binutils_prefix() + name

    def option_flags(self, options: Mapping[str, str]) -> list[str]:
        """Compiler flags of the ``gcc::`` options (the defaults overridden by ``options``)."""
        merged = {**self.options, **options}
        return [f"-{key.split('::', 1)[1]}={value}" for key, value in merged.items()
                if key.startswith("gcc::") and value]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} deploy target {self.device_type!r}>"


@dataclasses.dataclass
class PluginInfo:
    """One discovered plugin, as ``sol.plugins()`` reports it."""

    name: str
    kind: str  # "backend" | "frontend"
    distribution: str
    version: str
    status: str  # "ok" | "error" | "disabled"
    error: str = ""
    hooks: tuple[str, ...] = ()
    module: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"hooks": list(self.hooks)}
