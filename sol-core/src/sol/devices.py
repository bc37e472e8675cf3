"""Devices: probing the backends, the device dump, and the current device.

Probing is lazy (nothing is probed until a device is asked for) and cached
per process. A backend whose driver can hang or crash sets
``Backend.probe_timeout``; its probe then runs in a child process that is
killed after that many seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from . import log
from .errors import SolDeviceError
from .records import Backend, Device, ProbeResult

_log = log.get("devices")
_PROBES: dict[str, ProbeResult] = {}
_CURRENT: tuple[str, int] | None = None


def forget() -> None:
    """Drop cached probe results and the device selection (plugins changed)."""
    global _CURRENT
    _PROBES.clear()
    _CURRENT = None


def _registry():
    from .plugins import registry

    return registry()


def probe(backend: Backend) -> ProbeResult:
    """Probe one backend (cached), never raising: failures become the reason."""
    if backend.name in _PROBES:
        return _PROBES[backend.name]
    try:
        if backend.probe_timeout is None:
            result = backend.probe()
        else:
            result = _probe_out_of_process(backend, backend.probe_timeout)
        if not isinstance(result, ProbeResult):
            raise TypeError(f"probe() returned {type(result).__name__}, not ProbeResult")
        bad = [d for i, d in enumerate(result.devices) if d.type != backend.name or d.index != i]
        if bad:
            raise ValueError(f"probe() returned devices with wrong type/index: {', '.join(map(str, bad))}")
    except Exception as exc:
        _log.warning("probing %s devices failed: %s: %s", backend.name, type(exc).__name__, exc)
        result = ProbeResult(reason=f"probe failed: {type(exc).__name__}: {exc}")
    _PROBES[backend.name] = result
    return result


_PROBE_SCRIPT = (
    "import json, sys\n"
    "from sol.plugins import import_plugin_module\n"
    "backend = import_plugin_module(sys.argv[1])()\n"
    "print(json.dumps(backend.probe().to_dict()))\n"
)


def _probe_out_of_process(backend: Backend, timeout: float) -> ProbeResult:
    target = f"{type(backend).__module__}:{type(backend).__qualname__}"
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT, target],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ProbeResult(reason=f"device probe timed out after {timeout:g} s (driver hung?)")
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return ProbeResult(reason=f"device probe crashed (exit {done.returncode}): {tail}")
    lines = done.stdout.strip().splitlines()
    return ProbeResult.from_dict(json.loads(lines[-1]))


@dataclass(frozen=True)
class DeviceType:
    """``sol.device.x86``: a device type, usable wherever a type name is."""

    name: str

    def __str__(self) -> str:
        return self.name

    def devices(self) -> tuple[Device, ...]:
        return probe(_backend(self.name)).devices


def _backend(type_name: str) -> Backend:
    backends = _registry().backends
    if type_name not in backends:
        installed = ", ".join(sorted(backends)) or "none"
        raise SolDeviceError(
            f"unknown device type {type_name!r}; installed backends: {installed}. "
            f"Install the backend package (e.g. `pip install sol-backend-{type_name}`)."
        )
    return backends[type_name]


def all_devices() -> list[Device]:
    found: list[Device] = []
    for name in sorted(_registry().backends):
        found.extend(probe(_registry().backends[name]).devices)
    return found


def default_device() -> Device | None:
    """The device models run on: the selected one, else the first host CPU device (`Backend.host`), else any."""
    if _CURRENT is not None:
        return get_device(*_CURRENT)
    host = host_device()
    if host is not None:
        return host
    devices = all_devices()
    return devices[0] if devices else None


def host_device() -> Device | None:
    """This machine's CPU: the first device of the host backends (`Backend.host`), by name; None if none sees it.

    Only host backends are probed: probing every backend would start the out-of-process probes of CUDA/VE on every
    sol.optimize."""
    backends = _registry().backends
    for name in sorted(backends):
        if backends[name].host and probe(backends[name]).devices:
            return probe(backends[name]).devices[0]
    return None


def get_device(type_name: str | DeviceType, index: int = 0) -> Device:
    name = str(type_name)
    devs = probe(_backend(name)).devices
    if not 0 <= index < len(devs):
        reason = probe(_backend(name)).reason
        have = f"{len(devs)} {name} device(s)" + (f" ({reason})" if not devs and reason else "")
        raise SolDeviceError(f"no device {name}:{index}; this machine has {have}")
    return devs[index]


def dump() -> str:
    """The device dump text: one section per device type, the default marked."""
    reg = _registry()
    default = default_device()
    lines: list[str] = []
    for name in sorted(reg.backends):
        backend = reg.backends[name]
        result = probe(backend)
        lines.append(f"{name}: {backend.description} ({len(result.devices)} device(s))")
        for dev in result.devices:
            mark = "  (default)" if default is not None and dev.id == default.id else ""
            lines.append(f"  [{dev.id}] {_describe(dev)}{mark}")
        if not result.devices:
            lines.append(f"  no devices: {result.reason or 'none found'}")
    if not reg.backends:
        lines.append("no SOL backends installed (pip install sol-backend-x86)")
    broken = [p for p in reg.plugins() if p.kind == "backend" and p.status == "error"]
    for p in broken:
        lines.append(f"{p.name}: plugin error ({p.distribution}): {p.error}")
    return "\n".join(lines)


def _describe(dev: Device) -> str:
    props = dev.properties
    parts = [dev.name]
    if "cores" in props:
        parts.append(f"{props['cores']} cores")
    if "memory_bytes" in props:
        parts.append(f"{props['memory_bytes'] / 2**30:.1f} GiB")
    if "compute_capability" in props:
        parts.append(f"cc {props['compute_capability']}")
    return ", ".join(parts)


def devices(print_dump: bool = True) -> list[Device]:
    """Print the device dump (unless ``print_dump=False``) and return every device."""
    if print_dump:
        print(dump())
    return all_devices()


class DeviceNamespace:
    """``sol.device``: one attribute per installed device type, plus selection."""

    def __getattr__(self, name: str) -> DeviceType:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _registry().backends:
            return DeviceType(name)
        installed = ", ".join(sorted(_registry().backends)) or "none"
        raise AttributeError(f"sol.device has no device type {name!r} (installed: {installed})")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(_registry().backends))

    def __iter__(self) -> Iterator[DeviceType]:
        return (DeviceType(n) for n in sorted(_registry().backends))

    def set(self, type_name: str | DeviceType, index: int = 0) -> Device:
        """Select the device models run on; returns it."""
        global _CURRENT
        dev = get_device(type_name, index)
        _CURRENT = (dev.type, dev.index)
        _log.info("device set to %s (%s)", dev.id, dev.name)
        return dev

    def get(self) -> Device | None:
        """The device models currently run on."""
        return default_device()


device = DeviceNamespace()
