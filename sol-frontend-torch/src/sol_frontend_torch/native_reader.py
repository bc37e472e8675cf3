"""Reading many tensors' versions and addresses in one C call: the per-call parameter check of a compiled model.

Every inference call of a `SolModule` checks each parameter and buffer: was
it written in place (its version counter) or replaced (its data address)?
In Python that costs 0.3 us per tensor right after a model run has evicted
the interpreter's data from the caches (docs/debugging.md, "Time outside the
Clusters"): 80-160 us per call for MobileNetV2's 262 tensors, 4-8% of the
model's run time. ``native/tensor_reader.cpp`` reads the same values in one
loop (8 us for those 262). The same helper holds the C++ function that runs a
whole plain inference call (fast_call.py).

The helper is compiled against the installed torch's headers (about 19 s
on 2 cores), once per torch and Python version, into SOL's artifact cache
(`sol.cache`): in the foreground, inside the first `sol.optimize` that
finds it missing, as the "reader" stage of SOL's progress line. Nothing
is compiled later, while the model runs (a build in a background thread
took one of two cores for 15 s and halved a fresh install's speed). Where
it cannot be built (no C++ compiler, no torch headers) the check stays in
Python and one warning says why. Before it is used, its results are
compared with Python's own ``_version`` and ``data_ptr()``; any difference
keeps the Python check. ``sol.config["pytorch::native_reader"] = False``
turns it off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path

import sol
import torch
from sol import log
from sol.debug import progress

from .settings import READER_KEY

_log = log.get("torch")

SOURCE = Path(__file__).with_name("native") / "tensor_reader.cpp"
LIBRARY_NAME = "tensor_reader.so"

#: reader(tensors, versions address, pointers address) -> entries changed, or -1 (then ask Python)
Reader = Callable[[list[torch.Tensor], int, int], int]

_lock = threading.Lock()
#: whether this process has tried to load the helper (it tries once; a failure is reported once)
_tried = False
#: the verified reader once loaded; None before and after a failure
_reader: Reader | None = None
#: the helper library the reader came from (sol_fast_forward lives there too)
_library: ctypes.PyDLL | None = None


def ensure() -> Reader | None:
    """Load the helper (building it first if the cache lacks it), once per process; None where it cannot be.

    Called by `sol.optimize`: the build belongs to the compile, never to a model's calls.
    """
    global _tried, _reader
    if not sol.config[READER_KEY.name]:
        return None
    with _lock:
        if not _tried:
            _tried = True
            try:
                reader = _load()
                _verify(reader)
            except Exception as exc:  # any failure keeps the Python check, which is always correct
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                _log.warning("parameter checks stay in Python (80-160 us per call for MobileNetV2): %s", reason)
            else:
                _reader = reader
    return loaded()


def loaded() -> Reader | None:
    """The helper when it is loaded, verified and turned on; None otherwise (the caller checks in Python)."""
    reader = _reader
    return reader if reader is not None and sol.config[READER_KEY.name] else None


def _load() -> Reader:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise RuntimeError("no C++ compiler found (set CXX)")
    torch_dir = Path(torch.__file__).resolve().parent
    if not (torch_dir / "include" / "torch" / "csrc" / "autograd" / "python_variable.h").is_file():
        raise RuntimeError(f"the torch installation at {torch_dir} has no C++ headers")
    source = SOURCE.read_text()
    command = [compiler, "-O2", "-shared", "-fPIC", "-std=c++17", "-w",
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
               f"-I{sysconfig.get_paths()['include']}", f"-I{torch_dir / 'include'}",
               f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}"]
    link = [f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{torch_dir / 'lib'}"]
    identity = "\0".join([source, *command, *link, torch.__version__, str(torch_dir), sys.version, platform.machine()])
    key = hashlib.sha256(identity.encode()).hexdigest()

    def build(directory: Path) -> dict[str, str]:
        library = directory / LIBRARY_NAME
        progress.stage("reader")
        result = subprocess.run([*command, str(SOURCE), "-o", str(library), *link], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"compiling {SOURCE.name} failed:\n{result.stdout[-2000:]}")
        return {"torch": torch.__version__}

    entry = sol.cache.get_or_build(key, build)
    # PyDLL: the functions read Python objects, so they must run holding the GIL
    library = ctypes.PyDLL(str(entry.file(LIBRARY_NAME)))
    function = library.sol_read_tensors
    function.restype = ctypes.c_long
    function.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p]
    global _library
    _library = library
    return function


def fast_forward_function() -> ctypes._CFuncPtr | None:
    """The helper's sol_fast_forward (fast_call.py) when the helper is loaded and its struct is the one fast_call
    fills; None otherwise."""
    library = _library
    if library is None or loaded() is None:
        return None
    with _lock:
        function = getattr(library, "sol_fast_forward", None)
        if function is None:
            return None
        function.restype = ctypes.py_object
        function.argtypes = [ctypes.py_object, ctypes.c_void_p]
        size = library.sol_fast_call_size
        size.restype = ctypes.c_int64
        from .fast_call import FastCallStruct  # the struct's layout lives with its only user

        return function if size() == ctypes.sizeof(FastCallStruct) else None


def _verify(reader: Reader) -> None:
    """The helper's values must be Python's own, or it is not used (a torch whose tensor layout changed)."""
    base = torch.arange(8.0)
    tensors = [torch.zeros(3), base[2:], torch.nn.Parameter(torch.ones(2, 2)), torch.zeros(2, dtype=torch.float64)]
    versions = (ctypes.c_int64 * len(tensors))(*[-1] * len(tensors))  # no version yet: all differ
    pointers = (ctypes.c_void_p * len(tensors))()

    def expect(changed: int, what: str) -> None:
        got = reader(tensors, ctypes.addressof(versions), ctypes.addressof(pointers))
        if got != changed or list(versions) != [t._version for t in tensors] or \
                [p or 0 for p in pointers] != [t.data_ptr() for t in tensors]:
            raise RuntimeError(f"the compiled reader disagrees with Python ({what})")

    expect(2 * len(tensors), "first read")
    expect(0, "second read")
    base.add_(1.0)  # a view shares its base's version counter
    tensors[2].data = torch.zeros(2, 2)  # a new address, the same version
    expect(2, "after an in-place write and a .data assignment")
    with torch.inference_mode():
        unversioned = torch.zeros(1)
    if reader([unversioned], ctypes.addressof(versions), ctypes.addressof(pointers)) != -1:
        raise RuntimeError("the compiled reader read an inference tensor's version")
