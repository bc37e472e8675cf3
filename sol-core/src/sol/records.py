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

    ``host``: True for a host CPU type (x86, arm64): its code runs in this
    process on the framework's own tensors, so sol-core builds it without a
    device record (cross-compiled code is built and tested where no such CPU
    exists) and picks the first host device as the default device.

    ``framework_devices``: the framework device types whose tensors this
    backend computes on where they lie, per frontend (``{"pytorch": "cuda"}``):
    a model called with such tensors runs on them with no copies. Frontends
    read this instead of naming devices.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    probe_timeout: ClassVar[float | None] = None
    host: ClassVar[bool] = False
    framework_devices: ClassVar[Mapping[str, str]] = {}

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

    def framework_glue(self, frontend: str) -> Any:
        """What frontend ``frontend`` needs to run this device's models on the framework's own tensors of it (the
        types in ``framework_devices``), or None (the default): nothing beyond the `DeviceRuntime`.

        For ``"pytorch"``: an object with ``native_queue(model, device)``, called before each native call with the
        compiled model and the ``torch.device``; it returns the queue the model runs on (CUDA: PyTorch's current
        stream, and the model's workspace allocator becomes PyTorch's caching allocator), or None where the device
        queues work itself. The glue is the backend's, so the frontend knows no device.
        """
        return None

    def runtime(self, device: Device) -> DeviceRuntime | None:
        """The `DeviceRuntime` of ``device``, for a device with its own memory; None (the default) for host devices.

        sol-core asks once per device and process, when the first model is
        compiled for it, and runs every model of that device through it
        (`sol.runtime.OffloadedModel`): parameters copied once, inputs and
        outputs per call. Raise a `sol.errors.SolDeviceError` naming the
        device when it cannot be opened.
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


# -- devices with their own memory ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DevicePointer:
    """A launch argument: device memory, as the handle `DeviceRuntime.alloc` returned (plus a byte offset)."""

    handle: int
    offset: int = 0


@dataclasses.dataclass(frozen=True)
class HostBuffer:
    """A launch argument: host bytes the runtime places in device memory for the launch and passes by address.

    It is how pointer tables (the addresses of a model's inputs, parameters
    and outputs) travel with the launch itself instead of as separate
    copies: VEDA's stack arguments, a CUDA kernel's parameter buffer.
    ``copy_back``: the device's writes are copied back into ``data`` when the
    launch completes (e.g. profile counters).
    """

    data: Any  # a writable ctypes array or bytearray
    copy_back: bool = False


#: what a launch takes: device memory, a 64-bit integer, or host bytes passed by address
LaunchArg = DevicePointer | int | HostBuffer


@dataclasses.dataclass(frozen=True)
class Copy:
    """One transfer of ``nbytes`` between host address ``host`` and device memory ``device``."""

    device: DevicePointer
    host: int
    nbytes: int


class Launch:
    """A launch in flight: ``result()`` waits for it and returns what the launched function returned."""

    def result(self) -> int:
        """Wait for the launch and return the function's return value (64 bits; an ``int`` status in the low 32)."""
        raise NotImplementedError


class DeviceAllocator:
    """Device memory for workspace and model buffers. A `DeviceRuntime` is one; a frontend may hand in its own
    (PyTorch's caching allocator for its device tensors) so SOL's buffers come from the framework's pool."""

    def alloc(self, nbytes: int) -> int:
        """A handle of ``nbytes`` of device memory (64-byte aligned); raises SolDeviceError when out of memory."""
        raise NotImplementedError

    def free(self, handle: int) -> None:
        """Release memory `alloc` returned (after the work queued on it; a runtime may defer it to the queue)."""
        raise NotImplementedError


class DeviceRuntime(DeviceAllocator):
    """The one contract of a device with its own memory (VE, CUDA, a third party's accelerator).

    A backend returns one per device from `Backend.runtime`; sol-core does
    the rest (`sol.runtime.OffloadedModel`: device copies of parameters,
    workspace, per-call copies of inputs and outputs, one launch per call).
    Everything is asynchronous on a queue: ``queue=None`` is the runtime's own
    default queue; a frontend may pass a queue it owns (a framework stream),
    and device handles it owns (its tensors' memory). Every error is a
    `sol.errors.SolDeviceError` naming the device and the call.

    ``main_loop``: where a model's Clusters are sequenced. "device": the
    whole forward is one function launched on the device (the VE: one launch
    per call against the offload latency); "host": a host library launches
    one kernel per Cluster (CUDA).
    """

    #: the device this runtime drives, e.g. "ve:0" (every error message names it)
    device: str = ""
    main_loop: ClassVar[str] = "device"

    # -- copies (asynchronous: the host memory must stay valid until synchronize) ---------------------
    def copy_to_device(self, copies: list[Copy], queue: Any = None) -> None:
        """Host -> device. A runtime may group adjacent small copies into one transfer."""
        raise NotImplementedError

    def copy_to_host(self, copies: list[Copy], queue: Any = None) -> None:
        """Device -> host; the host bytes are written by the time ``synchronize(queue)`` returns."""
        raise NotImplementedError

    def copy_on_device(self, dst: DevicePointer, src: DevicePointer, nbytes: int, queue: Any = None) -> None:
        """Device -> device, ``nbytes`` from ``src`` to ``dst``."""
        raise NotImplementedError

    def address(self, pointer: DevicePointer) -> int:
        """The address device code dereferences for ``pointer`` (what pointer tables hold)."""
        raise NotImplementedError

    # -- code -----------------------------------------------------------------------------------------
    def load(self, artifact: Path) -> Any:
        """Load a built module (a file the backend's flavour produced); returns the runtime's module handle."""
        raise NotImplementedError

    def function(self, module: Any, name: str) -> Any:
        """A launchable function of a loaded module."""
        raise NotImplementedError

    def launch(self, function: Any, args: list[LaunchArg], queue: Any = None) -> Launch:
        """Start ``function(*args)`` on the device; asynchronous."""
        raise NotImplementedError

    def synchronize(self, queue: Any = None) -> None:
        """Wait until everything issued on ``queue`` has completed; raises the first error it reported."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} runtime of {self.device}>"


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
