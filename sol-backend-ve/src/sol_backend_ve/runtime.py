"""The VE's `DeviceRuntime`: sol-core's device contract spoken through VEDA (`veda`).

Handles are VEDA virtual pointers (a `DevicePointer`'s offset is added to
the virtual pointer, which VEDA allows within an allocation); pointer
tables hold the raw VE addresses `vedaMemPtr` gives; `HostBuffer` launch
arguments become VEDA stack arguments, copied with the launch. The queue is
VEDA stream 0 unless the caller hands in its own stream number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sol.errors import SolDeviceError
from sol.records import Copy, DevicePointer, DeviceRuntime, HostBuffer, Launch, LaunchArg

from .veda import Arg, Device, Function, Module, open_veda


def _stream(queue: Any) -> int:
    return 0 if queue is None else int(queue)


class VedaRuntime(DeviceRuntime):
    """One VE (or the emulated one) behind the contract of `sol.records.DeviceRuntime`."""

    def __init__(self, device: Device) -> None:
        self.ve = device
        self.device = device.label
        self._raw: dict[int, int] = {}  # virtual pointer -> VE address (vedaMemPtr is a round trip)

    def alloc(self, nbytes: int) -> int:
        return self.ve.alloc(max(int(nbytes), 1))

    def free(self, handle: int) -> None:
        self._raw.pop(handle, None)
        self.ve.free(handle)

    def address(self, pointer: DevicePointer) -> int:
        raw = self._raw.get(pointer.handle)
        if raw is None:
            raw = self._raw[pointer.handle] = self.ve.raw_pointer(pointer.handle)
        return raw + pointer.offset

    def copy_to_device(self, copies: list[Copy], queue: Any = None) -> None:
        self.ve.copy_group_to_device([(c.device.handle + c.device.offset, c.host, c.nbytes) for c in copies],
                                     _stream(queue))

    def copy_to_host(self, copies: list[Copy], queue: Any = None) -> None:
        self.ve.copy_group_to_host([(c.device.handle + c.device.offset, c.host, c.nbytes) for c in copies],
                                   _stream(queue))

    def copy_on_device(self, dst: DevicePointer, src: DevicePointer, nbytes: int, queue: Any = None) -> None:
        self.ve.copy_on_device(dst.handle + dst.offset, src.handle + src.offset, nbytes, _stream(queue))

    def load(self, artifact: Path) -> Module:
        return self.ve.load_module(artifact)

    def function(self, module: Module, name: str) -> Function:
        return module.function(name)

    def launch(self, function: Function, args: list[LaunchArg], queue: Any = None) -> Launch:
        return self.ve.launch(function, [_argument(a, self.device) for a in args], _stream(queue))  # type: ignore[return-value]

    def synchronize(self, queue: Any = None) -> None:
        self.ve.synchronize(_stream(queue))


def _argument(arg: LaunchArg, device: str) -> Arg:
    if isinstance(arg, DevicePointer):
        return Arg.vptr(arg.handle + arg.offset)
    if isinstance(arg, HostBuffer):
        return Arg.stack(arg.data, "inout" if arg.copy_back else "in")
    if isinstance(arg, int):
        return Arg.i64(arg)
    raise SolDeviceError(f"{device}: launch argument {arg!r} is not a DevicePointer, int or HostBuffer")


def open_runtime(index: int) -> VedaRuntime:
    """The runtime of ``ve:<index>``; a SOL error saying why when VEDA cannot be opened."""
    veda, reason = open_veda()
    if veda is None:
        raise SolDeviceError(f"ve:{index} cannot be used: {reason}")
    return VedaRuntime(veda.device(index))
