"""A loopback `DeviceRuntime`: the host pretending to be a device with its own memory.

It is the smallest complete implementation of the contract in
`sol.records` (a third party's backend looks like this, with its driver's
calls in place of numpy and ctypes), and what sol-core's own tests run
transparent offloading on: "device memory" is separate buffers reached only
through the copies, the queue is a worker thread (so everything really is
asynchronous), modules are host libraries loaded with ctypes.

Handles are never host addresses: a host pointer handed to `copy_to_device`
as the device side, or a handle that was freed, is an error naming the
device, as a real driver would report it.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import queue as queue_module
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import SolDeviceError
from ..records import Backend, Copy, Device, DevicePointer, DeviceRuntime, HostBuffer, Launch, LaunchArg, ProbeResult

_ALIGN = 64
#: handles are small integers shifted up: never a valid host address, never 0
_HANDLE_SHIFT = 48


class _Pending(Launch):
    def __init__(self, runtime: LoopbackRuntime) -> None:
        self._runtime = runtime
        self._done = threading.Event()
        self.value = 0

    def result(self) -> int:
        self._runtime.synchronize()
        return self.value


class LoopbackRuntime(DeviceRuntime):
    """See the module docstring. ``capacity``: bytes of "device memory" before allocations fail."""

    def __init__(self, device: str = "loop:0", capacity: int = 1 << 32) -> None:
        self.device = device
        self.capacity = capacity
        self.used = 0
        self._buffers: dict[int, np.ndarray] = {}
        self._ids = itertools.count(1)
        self._queue: queue_module.Queue[Callable[[], None] | None] = queue_module.Queue()
        self._error: BaseException | None = None
        self._idle = threading.Condition()
        self._pending = 0
        self._worker = threading.Thread(target=self._work, name=f"sol-{device}-queue", daemon=True)
        self._worker.start()
        #: every transfer the queue ran, as (direction, bytes): tests count them
        self.transfers: list[tuple[str, int]] = []

    # -- memory ------------------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        if self.used + nbytes > self.capacity:
            raise SolDeviceError(f"{self.device}: out of device memory allocating {nbytes} bytes "
                                 f"({self.used} of {self.capacity} in use); free models or use a smaller batch")
        handle = next(self._ids) << _HANDLE_SHIFT
        raw = np.zeros(nbytes + _ALIGN, dtype=np.uint8)
        self._buffers[handle] = raw
        self.used += nbytes
        return handle

    def free(self, handle: int) -> None:
        self.synchronize()  # the queue may still use it
        raw = self._buffers.pop(handle, None)
        if raw is None:
            raise SolDeviceError(f"{self.device}: free of {handle:#x}, which is not an allocation of this device")
        self.used -= raw.nbytes - _ALIGN

    def address(self, pointer: DevicePointer) -> int:
        raw = self._buffers.get(pointer.handle)
        if raw is None:
            raise SolDeviceError(f"{self.device}: {pointer.handle:#x} is not device memory of {self.device} "
                                 "(a host pointer, or memory already freed)")
        base = raw.ctypes.data
        return base + (-base) % _ALIGN + pointer.offset

    # -- the queue ---------------------------------------------------------------------------------------------
    def _enqueue(self, work: Callable[[], None]) -> None:
        with self._idle:
            self._pending += 1
        self._queue.put(work)

    def _work(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            try:
                if self._error is None:  # after an error the device is lost: later work is dropped
                    work()
            except BaseException as exc:  # reported by the next synchronize
                self._error = exc
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def synchronize(self, queue: Any = None) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)
        if self._error is not None:
            raise SolDeviceError(f"{self.device}: {self._error}") from self._error

    # -- copies ------------------------------------------------------------------------------------------------
    def copy_to_device(self, copies: list[Copy], queue: Any = None) -> None:
        targets = [(self.address(c.device), c.host, c.nbytes) for c in copies]  # bad handles fail here, loudly
        self._enqueue(lambda: self._transfer("to device", [(d, h, n) for d, h, n in targets]))

    def copy_to_host(self, copies: list[Copy], queue: Any = None) -> None:
        targets = [(c.host, self.address(c.device), c.nbytes) for c in copies]
        self._enqueue(lambda: self._transfer("to host", targets))

    def copy_on_device(self, dst: DevicePointer, src: DevicePointer, nbytes: int, queue: Any = None) -> None:
        target, source = self.address(dst), self.address(src)
        self._enqueue(lambda: ctypes.memmove(target, source, nbytes))

    def _transfer(self, direction: str, moves: list[tuple[int, int, int]]) -> None:
        for dst, src, nbytes in moves:
            ctypes.memmove(dst, src, nbytes)
        self.transfers.append((direction, sum(n for _, _, n in moves)))

    # -- code --------------------------------------------------------------------------------------------------
    def load(self, artifact: Path) -> Any:
        try:
            return ctypes.CDLL(str(artifact))
        except OSError as exc:
            raise SolDeviceError(f"{self.device}: cannot load module {artifact}: {exc}") from exc

    def function(self, module: Any, name: str) -> Any:
        try:
            fn = getattr(module, name)
        except AttributeError:
            raise SolDeviceError(f"{self.device}: module {module._name} has no function {name!r}") from None
        fn.restype = ctypes.c_uint64
        return fn

    def launch(self, function: Any, args: list[LaunchArg], queue: Any = None) -> Launch:
        pending = _Pending(self)
        staged: list[tuple[HostBuffer, np.ndarray]] = []
        values: list[Any] = []
        for arg in args:
            if isinstance(arg, DevicePointer):
                values.append(ctypes.c_void_p(self.address(arg)))
            elif isinstance(arg, HostBuffer):  # copied in at issue time, like a driver's parameter buffer
                data = np.frombuffer(bytes(memoryview(arg.data).cast("B")), dtype=np.uint8).copy()
                staged.append((arg, data))
                values.append(ctypes.c_void_p(data.ctypes.data))
            elif isinstance(arg, int):
                values.append(ctypes.c_int64(arg))
            else:
                raise SolDeviceError(f"{self.device}: launch argument {arg!r} is not a DevicePointer, int or HostBuffer")

        def run() -> None:
            pending.value = int(function(*values))
            for buffer, data in staged:
                if buffer.copy_back:
                    ctypes.memmove(ctypes.addressof(buffer.data), data.ctypes.data, data.nbytes)

        self._enqueue(run)
        return pending


class LoopbackBackend(Backend):
    """Device type ``loop``: host code (the generic flavour) run through a `LoopbackRuntime` per device."""

    name = "loop"
    description = "the host behind the device-runtime contract (tests)"
    #: every runtime opened, in order (tests read their transfers)
    runtimes: list[LoopbackRuntime] = []

    def probe(self) -> ProbeResult:
        return ProbeResult(devices=(Device("loop", 0, "Loopback device", "loop", {}),))

    def flavour(self) -> Any:
        from ..codegen import CpuFlavour

        return CpuFlavour("loop")

    def runtime(self, device: Device) -> LoopbackRuntime:
        runtime = LoopbackRuntime(device.id)
        LoopbackBackend.runtimes.append(runtime)
        return runtime


@contextlib.contextmanager
def loopback_device() -> Iterator[type[LoopbackBackend]]:
    """The installed plugins plus device type ``loop``, as the process-wide registry (then restored)."""
    from ..devices import forget
    from ..plugins import PluginRegistry, installed_entry_points, set_registry
    from ..runtime.offload import forget_runtimes
    from .plugins import FakeEntryPoint

    module = sys.modules.get("sol_testing_loopback_plugin")
    if module is None:
        module = ModuleType("sol_testing_loopback_plugin")
        from .. import hookimpl

        module.sol_backends = hookimpl(lambda: [LoopbackBackend()])  # type: ignore[attr-defined]
        sys.modules[module.__name__] = module
    entry = FakeEntryPoint("loop", module, distribution="sol-backend-loop")
    old = set_registry(PluginRegistry([*installed_entry_points(), entry]))
    forget_runtimes()
    forget()
    LoopbackBackend.runtimes.clear()
    try:
        yield LoopbackBackend
    finally:
        set_registry(old)
        forget_runtimes()
        forget()
