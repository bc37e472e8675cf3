"""Transparent offloading: a compiled model on a device with its own memory, called with host tensors.

`OffloadedModel` is a `CompiledModel` whose artifact lives on a device
reached through the backend's `sol.records.DeviceRuntime`. It keeps a device
context: the derived parameters, the workspace, device copies of the
parameters (uploaded by ``prepare``, which the frontends call only when a
parameter's version or address changed) and device buffers for inputs and
outputs. Per call only the inputs and outputs travel, and the whole forward
is one launch: the pointer tables the generated code reads go with the
launch itself (`HostBuffer`), not as copies.

``run_on_device`` is the same call on memory someone else owns (a
framework's device tensors and queue): no copies at all. Parameters that
already live on the device (a framework's device tensors) are handed in by
address with ``prepare_on_device``: the forward then reads them where they
are (a parameter table of device addresses), never a copy of them.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SolDeviceError, SolInputError
from ..ir import Graph, Tensor
from ..records import Copy, Device, DeviceAllocator, DevicePointer, DeviceRuntime, HostBuffer
from .compiled import CompiledModel

_ALIGN = 64
_DOUBLES = ctypes.c_double


def _aligned(nbytes: int) -> int:
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


def _status(result: int) -> int:
    """The int a generated entry point returned, from the 64-bit register a launch reports."""
    value = result & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _signed64(result: int) -> int:
    value = result & 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass
class TransferStats:
    """What crossed between host and device: tensors (logical copies) and bytes, per direction."""

    calls: int = 0
    to_device: int = 0
    to_device_bytes: int = 0
    to_host: int = 0
    to_host_bytes: int = 0
    #: parameter tensors uploaded by prepare (once, then again only after they changed)
    parameters: int = 0
    parameter_bytes: int = 0
    launches: int = 0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)

    def copy(self) -> TransferStats:
        return TransferStats(**{f.name: getattr(self, f.name) for f in fields(self)})

    def since(self, before: TransferStats) -> TransferStats:
        return TransferStats(**{f.name: getattr(self, f.name) - getattr(before, f.name) for f in fields(self)})

    def __str__(self) -> str:
        return (f"{self.to_device} copies ({self.to_device_bytes} B) to the device, {self.to_host} "
                f"({self.to_host_bytes} B) back, {self.parameters} parameter uploads ({self.parameter_bytes} B), "
                f"{self.launches} launches")


class _Block:
    """One device allocation holding several tensors back to back (64-byte aligned): grouped copies stay adjacent."""

    def __init__(self, allocator: DeviceAllocator, runtime: DeviceRuntime, sizes: list[int]) -> None:
        self.offsets = []
        total = 0
        for size in sizes:
            self.offsets.append(total)
            total += _aligned(max(size, 1))
        self.sizes = list(sizes)
        self.nbytes = max(total, _ALIGN)
        self._allocator = allocator
        self.handle = allocator.alloc(self.nbytes)
        base = runtime.address(DevicePointer(self.handle))
        #: what the device code reads, per tensor: a pointer table
        self.addresses = [base + offset for offset in self.offsets]

    def pointer(self, index: int) -> DevicePointer:
        return DevicePointer(self.handle, self.offsets[index])

    def free(self) -> None:
        if self.handle:
            handle, self.handle = self.handle, 0
            self._allocator.free(handle)


class DeviceModelLibrary:
    """The ABI's entry points of a module loaded on the device, each a launch (see `sol.runtime.ModelLibrary`)."""

    def __init__(self, runtime: DeviceRuntime, path: Path, prefix: str, metadata: dict[str, Any]) -> None:
        self.runtime = runtime
        self.path = Path(path)
        self.prefix = prefix
        self.module = runtime.load(self.path)
        self._functions: dict[str, Any] = {}
        #: like ModelLibrary.profile: None unless the model was built with per-Cluster timers
        self.profile = self._profile if metadata.get("profiled") else None

    def function(self, name: str) -> Any:
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self.runtime.function(self.module, f"{self.prefix}_{name}")
        return fn

    def call(self, name: str, *args: Any) -> int:
        """Launch an entry point and wait for what it returned."""
        return self.runtime.launch(self.function(name), list(args)).result()

    def _profile(self, seconds: Any, count: int) -> int:
        buffer = seconds if seconds is not None else (_DOUBLES * 1)()
        return _signed64(self.call("profile", HostBuffer(buffer, copy_back=True), int(count)))


class OffloadedModel(CompiledModel):
    """A CompiledModel on a device with its own memory, called with host pointers (see the module docstring)."""

    def __init__(self, graph: Graph, library_path: Path, prefix: str, runtime: DeviceRuntime, device: Device,
                 outputs: list[Tensor] | None = None, metadata: dict[str, Any] | None = None,
                 allocator: DeviceAllocator | None = None) -> None:
        self.runtime = runtime
        self.device = device
        self.allocator = allocator or runtime
        self.metadata = dict(metadata or {})
        self.transfers = TransferStats()
        self._params: _Block | None = None
        #: device addresses of parameters the caller owns (prepare_on_device); None: the model's own copies
        self._param_table: list[int] | None = None
        self._io: dict[int, tuple[_Block, _Block]] = {}  # batch -> (inputs, outputs): the last batch only
        self._blocks_lock = threading.Lock()
        super().__init__(graph, library_path, prefix, outputs, device.index)

    #: the framework device type of the tensors this model takes (transparent offloading: host tensors)
    device_type = "cpu"

    def _open(self, library_path: Path, prefix: str, device: int) -> None:
        self.library = DeviceModelLibrary(self.runtime, library_path, prefix, self.metadata)  # type: ignore[assignment]
        status = _status(self.library.call("init", int(device)))
        if status != 0:
            raise SolDeviceError(f"initialising model {self.graph.name!r} on {self.device} failed (status {status})")
        derived = _signed64(self.library.call("derived_size"))
        self._derived_block = _Block(self.allocator, self.runtime, [derived])
        self._derived_ptr = self._derived_block.pointer(0)  # type: ignore[assignment]

    # -- what the host-side CompiledModel did with ctypes, as launches ----------------------------------------------
    def workspace_size(self, batch: int) -> int:
        return _signed64(self.library.call("workspace_size", int(batch)))

    def seed(self, seed: int) -> None:
        self.library.call("seed", int(seed))

    def _grow_workspace(self, batch: int) -> Any:
        if batch == self._workspace_batch:
            return self._workspace_ptr
        needed = self.workspace_size(batch)
        if needed > self._workspace_bytes:
            if isinstance(self._workspace, _Block):
                self._workspace.free()
            self._workspace = _Block(self.allocator, self.runtime, [needed])
            self._workspace_ptr = self._workspace.pointer(0)  # type: ignore[assignment]
            self._workspace_bytes = needed
        self._workspace_batch = batch
        return self._workspace_ptr

    #: prepare() takes ``changed``: frontends that track parameter versions upload only what changed
    uploads_changed = True

    def prepare(self, param_ptrs: list[int], changed: list[bool] | None = None) -> None:
        """Upload the parameters (all, or those ``changed`` marks) and recompute the derived ones on the device.

        Frontends call this only when a parameter changed (PyTorch: its version counter or address).
        """
        self._check_count("parameter", param_ptrs, len(self.param_names))
        if changed is not None and len(changed) != len(param_ptrs):
            raise SolInputError(f"model {self.graph.name!r}: {len(changed)} 'changed' flags for {len(param_ptrs)} "
                                "parameters")
        with self._lock:
            fresh = self._params is None
            block = self._parameter_block()
            copies = [Copy(block.pointer(i), int(ptr), block.sizes[i]) for i, ptr in enumerate(param_ptrs)
                      if fresh or changed is None or changed[i]]
            self.runtime.copy_to_device(copies)
            self.transfers.parameters += len(copies)
            self.transfers.parameter_bytes += sum(c.nbytes for c in copies)
            self._param_table = None
            self._run_prepare(block.addresses)

    def prepare_on_device(self, param_addresses: list[int], queue: Any = None) -> None:
        """Use parameters that live on the device already (addresses as `DeviceRuntime.address` gives them, e.g. a
        framework's device tensors): nothing is copied; the derived parameters are recomputed from them (on
        ``queue``: the one the forwards run on). Call it again whenever they change (an optimizer step) or move."""
        self._check_count("parameter", param_addresses, len(self.param_names))
        with self._lock:
            self._param_table = [int(a) for a in param_addresses]
            self._run_prepare(self._param_table, queue)

    def _run_prepare(self, addresses: list[int], queue: Any = None) -> None:
        self.transfers.launches += 1
        args = [self._derived_ptr, HostBuffer(self._table(addresses)), 1]
        status = _status(self.runtime.launch(self.library.function("prepare"), args, queue).result())
        self._raise_status(status)
        self.prepared = True

    def _execute(self, input_ptrs: list[int], params: Any, output_ptrs: list[int], batch: int) -> int:
        with self._lock:
            inputs, outputs = self._io_blocks(batch)
            self.runtime.copy_to_device([Copy(inputs.pointer(i), int(p), inputs.sizes[i])
                                         for i, p in enumerate(input_ptrs)])
            launch = self._launch_forward(inputs.addresses, outputs.addresses, batch, None)
            self.runtime.copy_to_host([Copy(outputs.pointer(i), int(p), outputs.sizes[i])
                                       for i, p in enumerate(output_ptrs)])
            self.runtime.synchronize()
            stats = self.transfers
            stats.calls += 1
            stats.to_device += len(input_ptrs)
            stats.to_device_bytes += sum(inputs.sizes)
            stats.to_host += len(output_ptrs)
            stats.to_host_bytes += sum(outputs.sizes)
            return _status(launch.result())

    def run_on_device(self, input_addresses: list[int], output_addresses: list[int], batch: int,
                      queue: Any = None) -> Any:
        """One forward on device memory the caller owns (addresses as `DeviceRuntime.address` gives them), issued
        on the caller's ``queue``; returns the `Launch` (its result is the status). Parameters must be prepared."""
        if not self.prepared:
            raise SolInputError(f"model {self.graph.name!r}: parameters are not on {self.device} yet; call prepare()")
        with self._lock:
            return self._launch_forward(input_addresses, output_addresses, batch, queue)

    def finish(self, launch: Any) -> None:
        """Wait for a `run_on_device` launch; a SOL error if the model reported a failure."""
        self._raise_status(_status(launch.result()))

    def _launch_forward(self, inputs: list[int], outputs: list[int], batch: int, queue: Any) -> Any:
        workspace = self._workspace_ptr if batch == self._workspace_batch else self._grow_workspace(batch)
        params = self._param_table
        if params is None:
            assert self._params is not None
            params = self._params.addresses
        self.transfers.launches += 1
        args = [self._derived_ptr, HostBuffer(self._table(inputs)), HostBuffer(self._table(params)),
                HostBuffer(self._table(outputs)), workspace, int(batch)]
        return self.runtime.launch(self.library.function("forward"), args, queue)

    def profile(self) -> list[tuple[str, float]]:
        if self.library.profile is None:
            return super().profile()  # raises the "built without profiling" error
        count = int(self.library.profile(None, 0))
        seconds = (_DOUBLES * max(count, 1))()
        self.library.profile(seconds, count)
        titles = list(self.metadata.get("clusters", []))
        titles += [f"cluster {i}" for i in range(len(titles), count)]
        return [(titles[i], float(seconds[i])) for i in range(count)]

    # -- device buffers ---------------------------------------------------------------------------------------
    def _parameter_block(self) -> _Block:
        if self._params is None:
            sizes = [_nbytes(self.graph.params[name].concrete_shape(1), self.graph.params[name].dtype)
                     for name in self.param_names]
            self._params = _Block(self.allocator, self.runtime, sizes)
        return self._params

    def _io_blocks(self, batch: int) -> tuple[_Block, _Block]:
        blocks = self._io.get(batch)
        if blocks is None:
            for old_inputs, old_outputs in self._io.values():  # one batch at a time keeps device memory bounded
                old_inputs.free()
                old_outputs.free()
            self._io.clear()
            in_shapes, out_shapes = self.shapes(batch)
            blocks = (_Block(self.allocator, self.runtime,
                             [_nbytes(s, spec.dtype) for s, spec in zip(in_shapes, self.input_specs, strict=True)]),
                      _Block(self.allocator, self.runtime,
                             [_nbytes(s, spec.dtype) for s, spec in zip(out_shapes, self.output_specs, strict=True)]))
            self._io[batch] = blocks
        return blocks

    @staticmethod
    def _table(addresses: list[int]) -> ctypes.Array[ctypes.c_uint64]:
        return (ctypes.c_uint64 * max(len(addresses), 1))(*addresses)

    def close(self) -> None:
        """Free the model's device memory (also done when the model is garbage collected)."""
        blocks = [b for pair in self._io.values() for b in pair]
        blocks += [b for b in (self._params, getattr(self, "_derived_block", None), self._workspace)
                   if isinstance(b, _Block)]
        self._io.clear()
        for block in blocks:
            try:
                block.free()
            except Exception:  # a device lost at exit: nothing left to free
                pass

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<OffloadedModel {self.graph.name!r} on {self.device} from {self.library.path}>"


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


_RUNTIMES: dict[str, DeviceRuntime | None] = {}
_RUNTIMES_LOCK = threading.Lock()


def device_runtime(device: Device) -> DeviceRuntime | None:
    """The backend's runtime of ``device`` (None for host devices), opened once per process."""
    with _RUNTIMES_LOCK:
        if device.id not in _RUNTIMES:
            from ..plugins import registry

            backend = registry().backends.get(device.type)
            runtime = backend.runtime(device) if backend is not None else None
            if runtime is not None and not isinstance(runtime, DeviceRuntime):
                raise SolDeviceError(f"backend {device.type!r} returned {runtime!r} from runtime(), "
                                     "not a sol.records.DeviceRuntime")
            _RUNTIMES[device.id] = runtime
        return _RUNTIMES[device.id]


def forget_runtimes() -> list[DeviceRuntime]:
    """Drop the opened runtimes (tests; plugins changed); returns them, for callers that close their devices."""
    with _RUNTIMES_LOCK:
        dropped = [r for r in _RUNTIMES.values() if r is not None]
        _RUNTIMES.clear()
    return dropped
