"""The CUDA `DeviceRuntime`: sol-core's device contract spoken through the CUDA runtime API (``libcudart``).

``main_loop = "host"``: a model's artifact is a host library (built by the
CUDA flavour) whose entry points launch one or more kernels per Cluster on
a stream and return without waiting. So "load" is ``ctypes.CDLL`` of that
library, a "function" is one of its symbols, and a "launch" calls it here,
in this process:

- `DevicePointer` -> the device address (handles *are* device addresses:
  ``cudaMalloc``'s, or an owner's allocator's such as PyTorch's caching
  allocator, plus the offset);
- ``int`` -> ``int64_t``;
- `HostBuffer` -> the host address of its data: the main loop runs on the
  host, so the pointer tables stay in host memory (the host code reads them
  while it launches; a kernel never does);
- ``<prefix>_forward`` and ``<prefix>_prepare`` get the stream and then the
  call's math word appended (the flavour's ABI): `sol.precision.fp32_math`
  as of the launch, i.e. the settings of the framework calling (PyTorch's
  TF32 switches, which its frontend states around every call), strict fp32
  without one. So a setting flipped between two calls applies to the second.

Queues are ``cudaStream_t`` values as ints: ``None`` is the legacy default
stream (0); a frontend passes its own (PyTorch's
``torch.cuda.current_stream().cuda_stream``).

How errors surface:

- a failed CUDA runtime call (``cudaMalloc``, ``cudaMemcpyAsync``,
  ``cudaStreamSynchronize``) raises `SolDeviceError` naming ``cuda:N``, the
  call and ``cudaGetErrorString``;
- a failed kernel launch makes the entry point return ``SOL_STATUS_LIBRARY``
  (2): `CudaLaunch.result` returns that value at once, without waiting for
  the GPU (the host function has returned already), so no call synchronises;
- an error a kernel finds (an index out of range) sets the library's device
  status word. Reading it synchronises, so it is read only when asked:
  `CudaLaunch.device_status()`, and `CudaRuntime.synchronize(queue)`, which
  after ``cudaStreamSynchronize`` reads (and clears) the word of every
  library launched on that stream since the last check and raises
  `SolDeviceError` naming the library and the status. Transparent
  offloading synchronises every call, so it reports them every call;
  native offloading (PyTorch's CUDA tensors) reports them at the next
  ``synchronize`` of the runtime, like CUDA's own asynchronous errors.

Which ``libcudart``: the one already loaded in this process (a CUDA build of
PyTorch loads its own), else the one of PyTorch's NVIDIA wheels
(``nvidia/cu13/lib``, ``nvidia/cuda_runtime/lib``) or ``torch/lib``, else the
toolkit's (``$CUDA_HOME/lib64``, ``/usr/local/cuda*/lib64``), else the
loader's search path. The artifacts link CUDA's runtime statically; both
talk to the same driver and primary context, so streams and device memory
pass between them.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sol.errors import SolDeviceError
from sol.precision import fp32_math
from sol.records import Copy, DevicePointer, DeviceRuntime, HostBuffer, Launch, LaunchArg

# cudaMemcpyKind
HOST_TO_DEVICE = 1
DEVICE_TO_HOST = 2
DEVICE_TO_DEVICE = 3

#: what the flavour's entry points return (module.py's SOL_STATUS_*)
STATUS_NAMES = {0: "ok", 1: "index out of range (SOL_STATUS_INDEX)", 2: "a CUDA launch failed (SOL_STATUS_LIBRARY)",
                3: "a kernel's per-thread scratch did not fit CUDA's device heap (SOL_STATUS_SCRATCH)"}
#: entry points that take the stream and the math word as their last arguments
STREAM_FUNCTIONS = ("_forward", "_prepare")

_VOIDP = ctypes.c_void_p
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "cudaGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
    "cudaGetErrorName": (ctypes.c_char_p, [ctypes.c_int]),
    "cudaRuntimeGetVersion": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]),
    "cudaSetDevice": (ctypes.c_int, [ctypes.c_int]),
    "cudaMalloc": (ctypes.c_int, [ctypes.POINTER(_VOIDP), ctypes.c_size_t]),
    "cudaFree": (ctypes.c_int, [_VOIDP]),
    "cudaMemcpyAsync": (ctypes.c_int, [_VOIDP, _VOIDP, ctypes.c_size_t, ctypes.c_int, _VOIDP]),
    "cudaStreamSynchronize": (ctypes.c_int, [_VOIDP]),
}


def _loaded_cudart() -> str | None:
    """The path of a libcudart this process has loaded already (e.g. PyTorch's)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if "/libcudart.so" in path:
                    return path
    except OSError:
        pass
    return None


def cudart_candidates() -> list[str]:
    """Where libcudart is looked for, in order (see the module docstring)."""
    found: list[str] = []
    loaded = _loaded_cudart()
    if loaded:
        found.append(loaded)
    for package, parts in (("nvidia", ("cu13/lib", "cuda_runtime/lib", "cu12/lib")), ("torch", ("lib",))):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        roots = list(spec.submodule_search_locations or []) if spec is not None else []
        for root in roots:
            for part in parts:
                found += sorted(glob.glob(os.path.join(root, part, "libcudart.so*")), reverse=True)
    homes = [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH")]
    homes += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for home in filter(None, homes):
        found += sorted(glob.glob(os.path.join(home, "lib64", "libcudart.so*")), reverse=True)
    found += ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    return list(dict.fromkeys(found))


class Cudart:
    """A loaded libcudart with the few calls the runtime needs, typed."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self.lib = lib
        self.path = path
        for name, (restype, argtypes) in _SIGNATURES.items():
            function = getattr(lib, name)
            function.restype = restype
            function.argtypes = argtypes

    @classmethod
    def load(cls, library: str | None = None) -> tuple[Cudart | None, str]:
        """The library (``library``, else the first of `cudart_candidates` that loads), or None and why."""
        tried = []
        for candidate in [library] if library else cudart_candidates():
            try:
                return cls(ctypes.CDLL(candidate), candidate), ""
            except (OSError, AttributeError) as exc:
                tried.append(f"{candidate}: {exc}")
        return None, "libcudart not found (" + "; ".join(tried[-3:]) + ")"

    def error(self, code: int) -> str:
        text = self.lib.cudaGetErrorString(code)
        name = self.lib.cudaGetErrorName(code)
        text = text.decode("utf-8", "replace") if text else "unknown CUDA error"
        return f"{text} ({name.decode('ascii', 'replace') if name else 'cudaError'} {code})"

    def version(self) -> str:
        value = ctypes.c_int()
        if self.lib.cudaRuntimeGetVersion(ctypes.byref(value)) != 0:
            return "unknown"
        return f"{value.value // 1000}.{value.value % 1000 // 10}"


@dataclass
class CudaModule:
    """A loaded model library: its path, the ctypes handle and the prefixes launched on each stream."""

    path: Path
    lib: ctypes.CDLL
    #: stream -> prefixes launched there since their status word was last read
    unchecked: dict[int, set[str]] = field(default_factory=dict)

    def status(self, prefix: str, stream: int) -> int:
        """``<prefix>_status(stream)``: the device status word, read and cleared (synchronises ``stream``)."""
        fn = getattr(self.lib, f"{prefix}_status")
        fn.restype = ctypes.c_int
        fn.argtypes = [_VOIDP]
        self.unchecked.get(stream, set()).discard(prefix)
        return int(fn(_VOIDP(stream or None)))


@dataclass
class CudaFunction:
    module: CudaModule
    name: str
    fn: Any
    #: the ABI prefix (``sol_resnet18``) of a stream-taking entry point, else None
    prefix: str | None


class CudaLaunch(Launch):
    """A host entry point that has returned: its kernels may still run on ``stream``."""

    def __init__(self, runtime: CudaRuntime, function: CudaFunction, value: int, stream: int) -> None:
        self._runtime = runtime
        self._function = function
        self.value = value
        self.stream = stream

    def result(self) -> int:
        """What the entry point returned (``SOL_STATUS_LIBRARY`` when a launch failed); never waits for the GPU."""
        return self.value

    def device_status(self) -> int:
        """The library's device status word (an index error a kernel found), after waiting for the stream."""
        if self._function.prefix is None:
            return 0
        return self._function.module.status(self._function.prefix, self.stream)


def _stream(queue: Any) -> int:
    return 0 if queue is None else int(queue)


def _host_address(data: Any) -> int:
    if isinstance(data, bytearray):
        return ctypes.addressof((ctypes.c_char * len(data)).from_buffer(data))
    if isinstance(data, int):
        return data
    try:
        return ctypes.addressof(data)  # a ctypes array or structure
    except TypeError:
        pass
    raise TypeError(f"HostBuffer data must be a ctypes array or bytearray, not {type(data).__name__}")


class CudaRuntime(DeviceRuntime):
    """GPU ``cuda:<index>`` behind `sol.records.DeviceRuntime` (see the module docstring)."""

    main_loop = "host"

    def __init__(self, index: int = 0, cudart: Cudart | None = None) -> None:
        self.index = index
        self.device = f"cuda:{index}"
        if cudart is None:
            cudart, reason = Cudart.load()
            if cudart is None:
                raise SolDeviceError(f"{self.device} cannot be used: {reason}")
        self.cudart = cudart
        self._lib = cudart.lib
        self._modules: list[CudaModule] = []
        self._lock = threading.Lock()
        self._check("cudaSetDevice", self._lib.cudaSetDevice(index))

    def _check(self, call: str, code: int) -> None:
        if code != 0:
            raise SolDeviceError(f"{self.device}: {call} failed: {self.cudart.error(code)}")

    def _current(self) -> None:
        # the calling thread's device (a framework may have switched it); cheap when it is already current
        self._check("cudaSetDevice", self._lib.cudaSetDevice(self.index))

    # -- memory ------------------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        self._current()
        pointer = _VOIDP()
        code = self._lib.cudaMalloc(ctypes.byref(pointer), max(int(nbytes), 1))
        if code != 0:
            raise SolDeviceError(f"{self.device}: cudaMalloc of {nbytes} bytes failed: {self.cudart.error(code)}; "
                                 "free models or use a smaller batch")
        return int(pointer.value or 0)

    def free(self, handle: int) -> None:
        self._check(f"cudaFree({handle:#x})", self._lib.cudaFree(_VOIDP(handle)))

    def address(self, pointer: DevicePointer) -> int:
        return int(pointer.handle) + int(pointer.offset)

    # -- copies ------------------------------------------------------------------------------------------------
    def _memcpy(self, dst: int, src: int, nbytes: int, kind: int, queue: Any, what: str) -> None:
        if nbytes <= 0:
            return
        code = self._lib.cudaMemcpyAsync(_VOIDP(dst), _VOIDP(src), int(nbytes), kind, _VOIDP(_stream(queue) or None))
        if code != 0:
            raise SolDeviceError(f"{self.device}: cudaMemcpyAsync ({what}, {nbytes} bytes) failed: "
                                 f"{self.cudart.error(code)}")

    def copy_to_device(self, copies: list[Copy], queue: Any = None) -> None:
        self._current()
        for c in copies:
            self._memcpy(self.address(c.device), c.host, c.nbytes, HOST_TO_DEVICE, queue, "host to device")

    def copy_to_host(self, copies: list[Copy], queue: Any = None) -> None:
        self._current()
        for c in copies:
            self._memcpy(c.host, self.address(c.device), c.nbytes, DEVICE_TO_HOST, queue, "device to host")

    def copy_on_device(self, dst: DevicePointer, src: DevicePointer, nbytes: int, queue: Any = None) -> None:
        self._current()
        self._memcpy(self.address(dst), self.address(src), nbytes, DEVICE_TO_DEVICE, queue, "device to device")

    # -- code --------------------------------------------------------------------------------------------------
    def load(self, artifact: Path) -> CudaModule:
        from .libraries import preload

        preload()  # cuBLAS/cuDNN of this machine's wheels, for a module built elsewhere (its RUNPATH is that machine's)
        try:
            module = CudaModule(Path(artifact), ctypes.CDLL(str(artifact)))
        except OSError as exc:
            raise SolDeviceError(f"{self.device}: cannot load module {artifact}: {exc}") from exc
        with self._lock:
            self._modules.append(module)
        return module

    def function(self, module: CudaModule, name: str) -> CudaFunction:
        try:
            fn = getattr(module.lib, name)
        except AttributeError:
            raise SolDeviceError(f"{self.device}: module {module.path} has no function {name!r}") from None
        fn.restype = ctypes.c_uint64
        suffix = next((s for s in STREAM_FUNCTIONS if name.endswith(s)), None)
        return CudaFunction(module, name, fn, name[: -len(suffix)] if suffix else None)

    def launch(self, function: CudaFunction, args: list[LaunchArg], queue: Any = None) -> CudaLaunch:
        values = [self._argument(a) for a in args]
        stream = _stream(queue)
        if function.prefix is not None:
            values += [_VOIDP(stream or None), ctypes.c_int(fp32_math().word())]
        self._current()
        value = int(function.fn(*values))
        if function.prefix is not None:
            with self._lock:
                function.module.unchecked.setdefault(stream, set()).add(function.prefix)
        return CudaLaunch(self, function, value, stream)

    def _argument(self, arg: LaunchArg) -> Any:
        if isinstance(arg, DevicePointer):
            return _VOIDP(self.address(arg) or None)
        if isinstance(arg, HostBuffer):  # read by the host code during the call: passed where it is
            return _VOIDP(_host_address(arg.data))
        if isinstance(arg, int) and not isinstance(arg, bool):
            return ctypes.c_int64(arg)
        raise SolDeviceError(f"{self.device}: launch argument {arg!r} is not a DevicePointer, int or HostBuffer")

    def synchronize(self, queue: Any = None) -> None:
        """Wait for ``queue``; then the status words of the libraries launched on it (see the module docstring)."""
        stream = _stream(queue)
        self._current()
        self._check(f"cudaStreamSynchronize(stream {stream:#x})", self._lib.cudaStreamSynchronize(_VOIDP(stream or None)))
        with self._lock:
            pending = [(m, p) for m in self._modules for p in sorted(m.unchecked.get(stream, ()))]
        for module, prefix in pending:
            status = module.status(prefix, stream)
            if status != 0:
                raise SolDeviceError(f"{self.device}: {prefix} ({module.path.name}) reported "
                                     f"{STATUS_NAMES.get(status, f'status {status}')} on stream {stream:#x}")

    def versions(self) -> dict[str, str]:
        return {"runtime": self.cudart.version(), "cudart": self.cudart.path}


def open_runtime(index: int) -> CudaRuntime:
    """The runtime of ``cuda:<index>``; a SOL error saying why when libcudart cannot be loaded or the device set."""
    return CudaRuntime(index)
