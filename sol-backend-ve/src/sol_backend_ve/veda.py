"""ctypes binding of NEC's VEDA C API (libveda), the VE runtime SOL drives.

No compiled extension: the real ``libveda.so`` (VEOS) and the emulated one
(:mod:`sol_backend_ve.emulator`, ``SOL_VE_EMULATE=1``) are loaded the same way.

    veda, reason = open_veda()          # never raises; None and why when there is no VE
    dev = veda.device(0)                # ve:0, its primary context
    ptr = dev.alloc(1024)               # a VEDA virtual pointer (VEDAdeviceptr, int)
    dev.copy_to_device(ptr, host_address, 1024)
    mod = dev.load_module("kernels.so")
    pending = dev.launch(mod.function("f"), [Arg.vptr(ptr), Arg.i64(256)])
    pending.result()                    # synchronizes; the kernel's uint64 result

Every failing call raises :class:`sol.errors.SolDeviceError` naming the device,
the VEDA call, VEDA's error name and text, and what to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sol.errors import SolDeviceError

LIBRARY_ENV = "VEDA_LIBRARY"
NEC_LIBRARY = Path("/opt/nec/ve/veos/lib64/libveda.so")

# VEDAresult, in the order of VEDA's enums.h (the numbers are ABI).
ERROR_NAMES: tuple[str, ...] = tuple(
    "VEDA_" + n
    for n in """SUCCESS ERROR_ALREADY_INITIALIZED ERROR_CANNOT_CREATE_CONTEXT ERROR_CANNOT_CREATE_DEVICE
    ERROR_CANNOT_CREATE_STREAM ERROR_CANNOT_POP_CONTEXT ERROR_CANT_READ_SENSOR_FILE ERROR_FUNCTION_NOT_FOUND
    ERROR_INITIALIZING_DEVICE ERROR_INVALID_ARGS ERROR_INVALID_CONTEXT ERROR_INVALID_COREIDX ERROR_INVALID_DEVICE
    ERROR_INVALID_MODULE ERROR_INVALID_REQID ERROR_INVALID_STREAM ERROR_INVALID_VALUE ERROR_MODULE_NOT_FOUND
    ERROR_NOT_IMPLEMENTED ERROR_NOT_INITIALIZED ERROR_NO_DEVICES_FOUND ERROR_NO_SENSOR_FILE
    ERROR_OFFSETTED_VPTR_NOT_ALLOWED ERROR_OUT_OF_BOUNDS ERROR_OUT_OF_MEMORY ERROR_SHUTTING_DOWN
    ERROR_UNABLE_TO_DETECT_DEVICES ERROR_UNKNOWN_CONTEXT ERROR_UNKNOWN_DEVICE ERROR_UNKNOWN_KERNEL
    ERROR_UNKNOWN_MODULE ERROR_UNKNOWN_PPTR ERROR_UNKNOWN_ATTRIBUTE ERROR_UNKNOWN_STREAM ERROR_UNKNOWN_VPTR
    ERROR_VEDA_LD_LIBRARY_PATH_NOT_DEFINED ERROR_VEO_COMMAND_ERROR ERROR_VEO_COMMAND_EXCEPTION
    ERROR_VEO_COMMAND_UNFINISHED ERROR_VEO_COMMAND_UNKNOWN_ERROR ERROR_VEO_STATE_BLOCKED ERROR_VEO_STATE_RUNNING
    ERROR_VEO_STATE_SYSCALL ERROR_VEO_STATE_UNKNOWN ERROR_VPTR_ALREADY_ALLOCATED ERROR_TODO ERROR_ASSERT
    ERROR_CONTEXT_IS_DESTROYED ERROR_INVALID_HANDLE ERROR_UNKNOWN ERROR_INVALID_DTYPE ERROR_OFFSET_NOT_ALLOWED
    ERROR_UNKNOWN_HMEM ERROR_UNKNOWN_CALLBACK ERROR_CALLBACK_ALREADY_REGISTERED ERROR_MEMORY_MISALIGNED""".split()
)
SUCCESS = 0
ALREADY_INITIALIZED = ERROR_NAMES.index("VEDA_ERROR_ALREADY_INITIALIZED")

_DEVICE_LOST = "the VE process is gone: check `sol devices` and VEOS (systemctl status ve-os-launcher@*), then restart this Python process"
HINTS: dict[str, str] = {
    "VEDA_ERROR_OUT_OF_MEMORY": "free tensors or use a smaller batch",
    "VEDA_ERROR_UNKNOWN_VPTR": "the device pointer was freed or never allocated on this VE (or is a host pointer)",
    "VEDA_ERROR_OUT_OF_BOUNDS": "the copy or access reaches past the end of its allocation",
    "VEDA_ERROR_MODULE_NOT_FOUND": "check that the module file exists and was compiled for this VE",
    "VEDA_ERROR_FUNCTION_NOT_FOUND": 'check the kernel name and that it is exported extern "C"',
    "VEDA_ERROR_NO_DEVICES_FOUND": "check `sol devices`, VEDA_VISIBLE_DEVICES and that VEOS is running",
    "VEDA_ERROR_UNABLE_TO_DETECT_DEVICES": "check `sol devices` and that VEOS is running",
    "VEDA_ERROR_INITIALIZING_DEVICE": "check `sol devices` and VEOS",
    "VEDA_ERROR_VEO_COMMAND_EXCEPTION": _DEVICE_LOST,
    "VEDA_ERROR_VEO_COMMAND_ERROR": _DEVICE_LOST,
    "VEDA_ERROR_VEO_COMMAND_UNKNOWN_ERROR": _DEVICE_LOST,
    "VEDA_ERROR_VEO_STATE_UNKNOWN": _DEVICE_LOST,
    "VEDA_ERROR_CONTEXT_IS_DESTROYED": _DEVICE_LOST,
    "VEDA_ERROR_SHUTTING_DOWN": _DEVICE_LOST,
}

INTENT = {"in": 0, "inout": 1, "out": 2}  # VEDAargs_intent
ATTRIBUTE = {
    "clock_rate": 0,
    "clock_base": 1,
    "cores": 2,
    "memory_clock_rate": 3,
    "l1d_cache": 4,
    "l1i_cache": 5,
    "l2_cache": 6,
    "llc_cache": 7,
    "abi_version": 8,
    "firmware_version": 10,
    "model": 11,
}


def error_name(code: int) -> str:
    """VEDA's name of a VEDAresult (no library needed)."""
    return ERROR_NAMES[code] if 0 <= code < len(ERROR_NAMES) else f"VEDAresult({code})"


class VEDAfunction(ctypes.Structure):
    """VEDA passes kernels by value: the device address and the kernel's name."""

    _fields_ = [("ptr", ctypes.c_uint64), ("kernel", ctypes.c_char_p)]


_c = ctypes
_P = ctypes.c_void_p
# name: argument types (restype is VEDAresult = int for all)
_SIGNATURES: dict[str, list[Any]] = {
    "vedaInit": [_c.c_uint32],
    "vedaExit": [],
    "vedaDeviceGetCount": [_c.POINTER(_c.c_int)],
    "vedaDeviceGet": [_c.POINTER(_c.c_int), _c.c_int],
    "vedaDeviceGetName": [_c.c_char_p, _c.c_int, _c.c_int],
    "vedaDeviceGetAttribute": [_c.POINTER(_c.c_int), _c.c_int, _c.c_int],
    "vedaDeviceTotalMem": [_c.POINTER(_c.c_size_t), _c.c_int],
    "vedaDevicePrimaryCtxRetain": [_c.POINTER(_P), _c.c_int],
    "vedaCtxPushCurrent": [_P],
    "vedaCtxPopCurrent": [_c.POINTER(_P)],
    "vedaCtxSetCurrent": [_P],
    "vedaStreamSynchronize": [_c.c_int],
    "vedaMemAllocAsync": [_c.POINTER(_c.c_uint64), _c.c_size_t, _c.c_int],
    "vedaMemFreeAsync": [_c.c_uint64, _c.c_int],
    "vedaMemPtr": [_c.POINTER(_P), _c.c_uint64],
    "vedaMemcpyHtoDAsync": [_c.c_uint64, _P, _c.c_size_t, _c.c_int],
    "vedaMemcpyDtoHAsync": [_P, _c.c_uint64, _c.c_size_t, _c.c_int],
    "vedaMemcpyDtoDAsync": [_c.c_uint64, _c.c_uint64, _c.c_size_t, _c.c_int],
    "vedaModuleLoad": [_c.POINTER(_P), _c.c_char_p],
    "vedaModuleUnload": [_P],
    "vedaModuleGetFunction": [_c.POINTER(VEDAfunction), _P, _c.c_char_p],
    "vedaArgsCreate": [_c.POINTER(_P)],
    "vedaArgsDestroy": [_P],
    "vedaArgsSetI64": [_P, _c.c_int, _c.c_int64],
    "vedaArgsSetU64": [_P, _c.c_int, _c.c_uint64],
    "vedaArgsSetVPtr": [_P, _c.c_int, _c.c_uint64],
    "vedaArgsSetStack": [_P, _c.c_int, _P, _c.c_int, _c.c_size_t],
    "vedaLaunchKernelEx": [VEDAfunction, _c.c_int, _P, _c.c_int, _c.POINTER(_c.c_uint64)],
    "vedaGetErrorName": [_c.c_int, _c.POINTER(_c.c_char_p)],
    "vedaGetErrorString": [_c.c_int, _c.POINTER(_c.c_char_p)],
}


# -- library lookup ---------------------------------------------------------------


def find_library() -> tuple[str | None, bool, str]:
    """(path of the libveda to load, whether it is the emulator, how it was chosen or why none).

    ``SOL_VE_EMULATE=1``: the emulator's (built on demand); else ``VEDA_LIBRARY``;
    else NEC's install path; else ``ctypes.util.find_library("veda")``.
    """
    from . import emulator

    if emulator.enabled():
        return str(emulator.build().libveda), True, f"{emulator.ENV}=1"
    override = os.environ.get(LIBRARY_ENV, "").strip()
    if override:
        if not Path(override).is_file():
            return None, False, f"{LIBRARY_ENV}={override!r} does not exist"
        return override, False, f"{LIBRARY_ENV}={override!r}"
    if NEC_LIBRARY.is_file():
        return str(NEC_LIBRARY), False, str(NEC_LIBRARY)
    found = ctypes.util.find_library("veda")
    if found:
        return found, False, f"find_library('veda') -> {found}"
    return (
        None,
        False,
        (
            f"no libveda: {NEC_LIBRARY} is missing and none is on the library path "
            f"(install VEOS/VEDA, set {LIBRARY_ENV}, or {emulator.ENV}=1 for the emulated VE)"
        ),
    )


def open_veda() -> tuple[Veda | None, str]:
    """The VEDA runtime, or None and the reason. Never raises."""
    try:
        path, emulated, how = find_library()
        if path is None:
            return None, how
        veda = Veda(path, emulated=emulated)
        count = veda.device_count()
        if count == 0:
            return None, f"libveda ({how}) sees no VE"
        return veda, f"{count} VE(s) through libveda ({how})" + (" [emulated]" if veda.emulated else "")
    except Exception as exc:  # noqa: BLE001 - the probe must not fail the caller
        return None, f"{type(exc).__name__}: {exc}"


# -- copies -----------------------------------------------------------------------


@dataclass
class CopyStats:
    """Transfers issued to the device (each one VEDA call), and their bytes."""

    htod_transfers: int = 0
    htod_bytes: int = 0
    dtoh_transfers: int = 0
    dtoh_bytes: int = 0
    dtod_transfers: int = 0
    launches: int = 0

    def reset(self) -> None:
        self.htod_transfers = self.htod_bytes = self.dtoh_transfers = 0
        self.dtoh_bytes = self.dtod_transfers = self.launches = 0

    @property
    def transfers(self) -> int:
        return self.htod_transfers + self.dtoh_transfers + self.dtod_transfers


@dataclass(frozen=True)
class Copy:
    """One host<->device copy: device pointer (vptr), host address, bytes."""

    device: int
    host: int
    nbytes: int


def group_copies(copies: Iterable[Copy | tuple[int, int, int]], small: int = 1 << 16) -> list[list[Copy]]:
    """Runs of copies to move as one transfer each.

    Copies of at most ``small`` bytes whose device ranges are adjacent (same
    allocation, one ends where the next begins) form one run; every other copy
    is a run of its own.
    """
    items = sorted((c if isinstance(c, Copy) else Copy(*c) for c in copies), key=lambda c: c.device)
    runs: list[list[Copy]] = []
    for c in items:
        if c.nbytes == 0:
            continue
        last = runs[-1][-1] if runs else None
        if last is not None and c.nbytes <= small and last.nbytes <= small and last.device + last.nbytes == c.device:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


# -- kernels ----------------------------------------------------------------------


@dataclass(frozen=True)
class Arg:
    """One kernel argument: ``Arg.vptr(p)``, ``Arg.i64(n)``, ``Arg.u64(n)``, ``Arg.stack(buf, "in"|"out"|"inout")``."""

    kind: str
    value: Any
    intent: str = "in"

    @staticmethod
    def vptr(ptr: int) -> Arg:
        return Arg("vptr", int(ptr))

    @staticmethod
    def i64(value: int) -> Arg:
        return Arg("i64", int(value))

    @staticmethod
    def u64(value: int) -> Arg:
        return Arg("u64", int(value))

    @staticmethod
    def stack(buffer: Any, intent: str = "in") -> Arg:
        """A host buffer (bytes, bytearray, numpy array, ctypes object) copied to the device's stack.

        OUT/INOUT buffers must be writable; they receive the device's bytes when the kernel finishes.
        """
        if intent not in INTENT:
            raise ValueError(f"intent must be one of {sorted(INTENT)}, not {intent!r}")
        return Arg("stack", buffer, intent)


@dataclass
class Function:
    """A kernel of a loaded module."""

    module: Module
    name: str
    handle: VEDAfunction


@dataclass
class Module:
    device: Device
    path: str
    handle: int

    def function(self, name: str) -> Function:
        fn = VEDAfunction()
        self.device._call(
            "vedaModuleGetFunction",
            ctypes.byref(fn),
            ctypes.c_void_p(self.handle),
            name.encode(),
            what=f"kernel {name!r} of {self.path}",
        )
        return Function(self, name, fn)

    def unload(self) -> None:
        self.device._call("vedaModuleUnload", ctypes.c_void_p(self.handle), what=self.path)


@dataclass
class Pending:
    """A launched kernel; ``result()`` synchronizes its stream and returns the kernel's uint64."""

    device: Device
    stream: int
    kernel: str
    _result: ctypes.c_uint64
    _keep: list[Any] = field(default_factory=list)  # stack buffers live until the kernel is done

    def result(self) -> int:
        self.device.synchronize(self.stream)
        self._keep.clear()
        return int(self._result.value)


# -- the runtime ------------------------------------------------------------------


class Veda:
    """One loaded libveda (NEC's or the emulator's)."""

    def __init__(self, path: str, emulated: bool | None = None) -> None:
        self.path = path
        self.lib = ctypes.CDLL(path)
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        self._detail = getattr(self.lib, "solVedaEmuLastError", None)  # the emulator's explanations
        if self._detail is not None:
            self._detail.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
            self._detail.restype = ctypes.c_int
        self.emulated = self._detail is not None if emulated is None else emulated or self._detail is not None
        self._devices: dict[int, Device] = {}
        self._closed = False
        rc = self.lib.vedaInit(0)
        if rc not in (SUCCESS, ALREADY_INITIALIZED):
            raise self.error(rc, "vedaInit", "ve")

    def error(self, code: int, call: str, device: str, what: str = "") -> SolDeviceError:
        name, text = self._names(code)
        detail = ""
        if self._detail is not None:
            out = ctypes.c_char_p()
            self._detail(ctypes.byref(out))
            detail = (out.value or b"").decode(errors="replace")
        label = f"{device} (emulated)" if self.emulated else device
        parts = [f"{label}: {call}{f' ({what})' if what else ''} failed with {name}: {text}"]
        if detail:
            parts.append(detail)
        hint = HINTS.get(name)
        if hint == _DEVICE_LOST and self.emulated:
            hint = "the emulated VE is lost: Veda.close() and open_veda() start a new one"
        if hint:
            parts.append(hint)
        return SolDeviceError("; ".join(parts))

    def _names(self, code: int) -> tuple[str, str]:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        try:
            if self.lib.vedaGetErrorName(code, ctypes.byref(name)) != SUCCESS or not name.value:
                raise ValueError
            self.lib.vedaGetErrorString(code, ctypes.byref(text))
            return name.value.decode(), (text.value or b"").decode()
        except (ValueError, OSError):
            return error_name(code), "unknown error"

    def call(self, fn: str, *args: Any, device: str = "ve", what: str = "") -> None:
        rc = getattr(self.lib, fn)(*args)
        if rc != SUCCESS:
            raise self.error(rc, fn, device, what)

    def device_count(self) -> int:
        count = ctypes.c_int()
        self.call("vedaDeviceGetCount", ctypes.byref(count))
        return count.value

    def device(self, index: int = 0) -> Device:
        """``ve:index`` with its primary context (retained once per Veda)."""
        if index not in self._devices:
            self._devices[index] = Device(self, index)
        return self._devices[index]

    def close(self) -> None:
        """vedaExit: every device, pointer and module of this library becomes invalid."""
        if not self._closed:
            self._closed = True
            self._devices.clear()
            self.lib.vedaExit()


class Device:
    """One VE and its primary context. Pointers are VEDA virtual pointers (ints)."""

    def __init__(self, veda: Veda, index: int) -> None:
        self.veda = veda
        self.index = index
        self.label = f"ve:{index}"
        self.stats = CopyStats()
        self._local = threading.local()  # which thread has our context current
        self._after_sync: list[Callable[[], None]] = []  # unpacking of grouped DtoH copies
        self._keep: list[Any] = []  # staging buffers alive until the next synchronize
        handle = ctypes.c_int()
        veda.call("vedaDeviceGet", ctypes.byref(handle), index, device=self.label)
        self.handle = handle.value
        ctx = ctypes.c_void_p()
        veda.call("vedaDevicePrimaryCtxRetain", ctypes.byref(ctx), self.handle, device=self.label)
        self.context = ctx

    # -- plumbing
    def _call(self, fn: str, *args: Any, what: str = "") -> None:
        if getattr(self._local, "current", None) is not self.context:
            self.veda.call("vedaCtxSetCurrent", self.context, device=self.label)
            self._local.current = self.context
        self.veda.call(fn, *args, device=self.label, what=what)

    # -- properties
    @property
    def name(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self.veda.call("vedaDeviceGetName", buf, len(buf), self.handle, device=self.label)
        return buf.value.decode(errors="replace")

    def attribute(self, name: str) -> int:
        value = ctypes.c_int()
        self.veda.call("vedaDeviceGetAttribute", ctypes.byref(value), ATTRIBUTE[name], self.handle, device=self.label)
        return value.value

    @property
    def total_memory(self) -> int:
        value = ctypes.c_size_t()
        self.veda.call("vedaDeviceTotalMem", ctypes.byref(value), self.handle, device=self.label)
        return value.value

    def properties(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cores": self.attribute("cores"),
            "memory": self.total_memory,
            "emulated": self.veda.emulated,
        }

    # -- memory
    def alloc(self, nbytes: int, stream: int = 0) -> int:
        ptr = ctypes.c_uint64()
        self._call("vedaMemAllocAsync", ctypes.byref(ptr), nbytes, stream, what=f"{nbytes} bytes")
        return ptr.value

    def free(self, ptr: int, stream: int = 0) -> None:
        self._call("vedaMemFreeAsync", ptr, stream, what=hex(ptr))

    def raw_pointer(self, ptr: int) -> int:
        """The device address behind a virtual pointer (for pointer tables that device code reads)."""
        out = ctypes.c_void_p()
        self._call("vedaMemPtr", ctypes.byref(out), ptr, what=hex(ptr))
        return out.value or 0

    def copy_to_device(self, dst: int, src: int | Any, nbytes: int, stream: int = 0) -> None:
        """Asynchronous: ``src`` (an address, or a buffer kept alive here) is read when the copy runs."""
        address = self._address(src)
        self._call("vedaMemcpyHtoDAsync", dst, address, nbytes, stream, what=f"{nbytes} bytes to {hex(dst)}")
        self.stats.htod_transfers += 1
        self.stats.htod_bytes += nbytes

    def copy_to_host(self, dst: int | Any, src: int, nbytes: int, stream: int = 0) -> None:
        """Asynchronous: ``dst`` holds the bytes once ``synchronize`` returns."""
        address = self._address(dst)
        self._call("vedaMemcpyDtoHAsync", address, src, nbytes, stream, what=f"{nbytes} bytes from {hex(src)}")
        self.stats.dtoh_transfers += 1
        self.stats.dtoh_bytes += nbytes

    def copy_on_device(self, dst: int, src: int, nbytes: int, stream: int = 0) -> None:
        self._call("vedaMemcpyDtoDAsync", dst, src, nbytes, stream, what=f"{nbytes} bytes {hex(src)} -> {hex(dst)}")
        self.stats.dtod_transfers += 1

    def copy_group_to_device(
        self, copies: Sequence[Copy | tuple[int, int, int]], stream: int = 0, small: int = 1 << 16
    ) -> int:
        """Several (device, host address, bytes) copies; adjacent small ones travel as one transfer.

        Returns the number of transfers issued.
        """
        runs = group_copies(copies, small)
        for run in runs:
            if len(run) == 1:
                self.copy_to_device(run[0].device, run[0].host, run[0].nbytes, stream)
                continue
            staging = ctypes.create_string_buffer(sum(c.nbytes for c in run))
            at = ctypes.addressof(staging)
            for c in run:
                ctypes.memmove(at, c.host, c.nbytes)
                at += c.nbytes
            self.copy_to_device(run[0].device, staging, len(staging), stream)
        return len(runs)

    def copy_group_to_host(
        self, copies: Sequence[Copy | tuple[int, int, int]], stream: int = 0, small: int = 1 << 16
    ) -> int:
        """The mirror of ``copy_group_to_device``: one transfer per run, unpacked by ``synchronize``."""
        runs = group_copies(copies, small)
        for run in runs:
            if len(run) == 1:
                self.copy_to_host(run[0].host, run[0].device, run[0].nbytes, stream)
                continue
            staging = ctypes.create_string_buffer(sum(c.nbytes for c in run))
            self.copy_to_host(staging, run[0].device, len(staging), stream)
            self._after_sync.append(lambda run=run, staging=staging: _unpack(run, staging))
        return len(runs)

    def synchronize(self, stream: int = 0) -> None:
        try:
            self._call("vedaStreamSynchronize", stream, what=f"stream {stream}")
        finally:
            self._keep.clear()
        pending, self._after_sync = self._after_sync, []
        for unpack in pending:
            unpack()

    def _address(self, buffer: int | Any) -> int:
        if isinstance(buffer, int):
            return buffer
        self._keep.append(buffer)
        return _buffer_address(buffer)

    # -- modules and kernels
    def load_module(self, path: str | os.PathLike[str]) -> Module:
        handle = ctypes.c_void_p()
        self._call("vedaModuleLoad", ctypes.byref(handle), os.fsencode(path), what=str(path))
        return Module(self, str(path), handle.value or 0)

    def launch(self, function: Function, args: Sequence[Arg], stream: int = 0) -> Pending:
        """Queue the kernel; its uint64 result is written when it finishes (``Pending.result()``)."""
        handle = ctypes.c_void_p()
        self._call("vedaArgsCreate", ctypes.byref(handle))
        pending = Pending(self, stream, function.name, ctypes.c_uint64())
        try:
            for i, arg in enumerate(args):
                self._set_arg(handle, i, arg, pending._keep, function.name)
        except BaseException:
            self.veda.lib.vedaArgsDestroy(handle)
            raise
        # destroyArgs=1: VEDA frees the args once queued (also when queuing fails).
        self._call(
            "vedaLaunchKernelEx",
            function.handle,
            stream,
            handle,
            1,
            ctypes.byref(pending._result),
            what=f"kernel {function.name}",
        )
        self.stats.launches += 1
        return pending

    def _set_arg(self, handle: ctypes.c_void_p, i: int, arg: Arg, keep: list[Any], kernel: str) -> None:
        what = f"argument {i} of kernel {kernel}"
        if arg.kind == "vptr":
            self._call("vedaArgsSetVPtr", handle, i, arg.value, what=what)
        elif arg.kind == "i64":
            self._call("vedaArgsSetI64", handle, i, arg.value, what=what)
        elif arg.kind == "u64":
            self._call("vedaArgsSetU64", handle, i, arg.value, what=what)
        elif arg.kind == "stack":
            buffer = arg.value
            if arg.intent == "in" and isinstance(buffer, bytes):
                buffer = ctypes.create_string_buffer(buffer, len(buffer))
            keep.append(buffer)
            self._keep.append(buffer)  # also when the Pending is dropped unread
            size = (
                memoryview(buffer).nbytes
                if not isinstance(buffer, ctypes.Array | ctypes.Structure)
                else ctypes.sizeof(buffer)
            )
            self._call("vedaArgsSetStack", handle, i, _buffer_address(buffer), INTENT[arg.intent], size, what=what)
        else:
            raise ValueError(f"{what}: unknown kind {arg.kind!r}")


def _buffer_address(buffer: Any) -> int:
    """The address of a ctypes object, a numpy array or a writable buffer."""
    if isinstance(buffer, ctypes._SimpleCData | ctypes.Array | ctypes.Structure):
        return ctypes.addressof(buffer)
    if isinstance(buffer, bytes):  # read-only: only ever a source
        return ctypes.cast(ctypes.c_char_p(buffer), ctypes.c_void_p).value or 0
    interface = getattr(buffer, "__array_interface__", None)
    if interface is not None:
        return int(interface["data"][0])
    return ctypes.addressof((ctypes.c_char * memoryview(buffer).nbytes).from_buffer(buffer))


def _unpack(run: list[Copy], staging: ctypes.Array) -> None:
    at = ctypes.addressof(staging)
    for c in run:
        ctypes.memmove(c.host, at, c.nbytes)
        at += c.nbytes
