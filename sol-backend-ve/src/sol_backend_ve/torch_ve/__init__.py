"""PyTorch's own ``VE`` device, backed by VEDA (or SOL's emulated VE): tensors live on the VE.

``register()`` installs ``torch.ve`` (`sol_backend_ve.torch_ve.device`), ``Tensor.ve()`` and
``Module.ve()``; where a VE is visible it also loads the C++ extension (``sol_torch_ve.cpp``: allocator
over VEDA memory, device guard, empty/strided/views/resize, copies, ``fill_``/``zero_``,
``_local_scalar_dense``, and a CPU fallback for every other op). The extension is compiled against the
installed torch on first use, once per torch and Python version, into SOL's cache (the "torch-ve" stage
of SOL's progress line), in a child process. It never runs inside ``import torch``, and ``import sol``
never imports torch. Any failure is one warning; ``torch.ve.is_available()`` is then False.

A VE tensor's ``data_ptr()`` is the raw VE address generated code reads (``vedaMemPtr``), so SOL's
compiled models take VE tensors' pointers as they are (`sol.runtime.offload.OffloadedModel.run_on_device`).

Ops without a native kernel run on the CPU (inputs copied there and results back), with one warning per
op naming it; ``sol.config["ve::cpu_fallback"] = False`` makes them raise instead.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

SOURCE = Path(__file__).with_name("sol_torch_ve.cpp")
#: the extension's sources (compiled) and the headers they include (in the cache key)
SOURCES = (SOURCE, SOURCE.with_name("native_ops.cpp"))
HEADERS = (SOURCE.with_name("sol_torch_ve.h"), SOURCE.with_name("ve_kernels.h"))
NAME = "sol_torch_ve"

FALLBACK_NAME = "ve::cpu_fallback"

_lock = threading.RLock()
#: python: torch.ve and friends installed; deferred: the device starts at its first use (PyTorch's autoload)
_state: dict[str, Any] = {"registered": False, "python": False, "deferred": False, "extension": None,
                          "reason": "not registered yet"}
_warned: set[str] = set()
#: ops that ran through the CPU fallback in this process, and how often
fallback_counts: dict[str, int] = {}


def __getattr__(name: str) -> Any:
    # The config key needs sol, which this module does not import: PyTorch's autoload (import torch) loads it.
    if name == "FALLBACK_KEY":
        from sol.records import ConfigKey

        key = ConfigKey(FALLBACK_NAME, bool, True,
                        "Run PyTorch ops that have no VE kernel on the CPU (copying their VE tensors there and back, "
                        "one warning per op); False raises instead, naming the op.")
        globals()["FALLBACK_KEY"] = key
        return key
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def extension() -> ModuleType | None:
    """The loaded C++ extension, or None (``reason()`` says why); starts a deferred device (its first use)."""
    if _state["deferred"] and not _state["registered"]:
        register()
    return _state["extension"]


def reason() -> str:
    """Why the VE cannot be used from PyTorch (empty once it can)."""
    return "" if _state["extension"] is not None else str(_state["reason"])


COPY_COUNTERS = ("to_ve_copies", "to_ve_bytes", "to_cpu_copies", "to_cpu_bytes")


def copy_counters() -> dict[str, int]:
    """Host<->VE transfers of PyTorch's VE tensors in this process (CPU-fallback ones included).

    ``{"to_ve_copies", "to_ve_bytes", "to_cpu_copies", "to_cpu_bytes"}``: one copy per VEDA transfer. All zero while
    the extension is not loaded (nothing can have crossed).
    """
    module = extension()
    if module is None:
        return dict.fromkeys(COPY_COUNTERS, 0)
    counts = module.copy_counters()
    return {name: int(counts[name]) for name in COPY_COUNTERS}


def reset_copy_counters() -> None:
    """Start counting `copy_counters` from zero."""
    module = extension()
    if module is not None:
        module.reset_copy_counters()


def register(lazy: bool = False) -> bool:
    """Install ``torch.ve``, ``Tensor.ve()``, ``Module.ve()``, torch.save/load support and, where a VE is visible,
    load the extension (compiled first if SOL's cache lacks it).

    ``lazy`` (at import time: PyTorch's autoload inside ``import torch``, ``import sol_backend_ve``): only the
    Python side; the extension loads at the first use of the VE (creating a VE tensor, any ``torch.ve`` call,
    ``torch.load`` onto the VE; see `sol_backend_ve.torch_ve.lazy`).
    Idempotent; never raises: a failure is one warning and ``torch.ve.is_available()`` False.
    """
    with _lock:
        if _state["registered"]:
            return _state["extension"] is not None
        if not _state["python"]:
            _state["python"] = True
            try:
                _install_python()
            except Exception as exc:  # noqa: BLE001 - torch must keep working
                warnings.warn(f"SOL could not register torch.ve: {exc}", stacklevel=2)
                _state["reason"] = str(exc)
                _state["registered"] = True
                return False
        if lazy:
            _state["deferred"] = True
            _state["reason"] = "the VE device starts at its first use"
            from . import lazy as on_first_use

            on_first_use.install(register)
            return False
        _state["registered"] = True
        try:
            from ..veda import find_library, open_veda

            path, _, how = find_library()
            if path is None:
                # no VE runtime installed: nothing to warn about; an explicit register() looks again later
                _state["reason"] = how
                _state["registered"] = _state["deferred"] = False
                return False
            veda, why = open_veda()
            if veda is None:
                raise RuntimeError(why)  # a VE runtime that does not work: warned below
            from . import kernels
            from . import lazy as on_first_use

            on_first_use.remove()  # the extension registers its own kernels for these ops
            module = _load()
            module.init(str(path), str(kernels.library()), _fallback_policy)
        except Exception as exc:  # noqa: BLE001
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            _state["reason"] = why
            warnings.warn(f"SOL's PyTorch VE device is not available: {why}", stacklevel=2)
            return False
        _state["extension"] = module
        _state["reason"] = ""
        _backward_without_engine_queues(module)
        return True


def _backward_without_engine_queues(module: ModuleType) -> None:
    """A VE started after the process's first backward: its backward passes run on the calling thread.

    PyTorch's autograd engine makes its per-device queues once, at the first backward, for the devices registered
    then; a VE started later has none, and a backward through VE tensors would stop at an internal assert. With the
    engine's multithreading off (a per-thread setting), the backward runs on the thread that calls it instead.
    """
    queues, devices = module.autograd_device_queues(), module.device_count()
    if queues < 0 or queues >= devices:
        return
    import torch

    torch.autograd.set_multithreading_enabled(False)
    warnings.warn(f"PyTorch's autograd engine started before the VE (a backward ran earlier in this process; it has "
                  f"queues for {queues} device(s), the VE has {devices}): backward passes through VE tensors run on "
                  f"this thread ({threading.current_thread().name}); other threads need "
                  "torch.autograd.set_multithreading_enabled(False). Start the VE first (torch.ve.init()) to avoid "
                  "this.", stacklevel=3)


def start_if_torch_imported() -> None:
    """SOL's plugins loaded in a PyTorch process: start the VE device now (where a VE runtime is visible)."""
    module = sys.modules.get("torch")
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
        register()


def register_if_torch_imported() -> None:
    """``import sol_backend_ve`` in a PyTorch process: torch.ve now, the device itself at its first use."""
    if "torch" in sys.modules:
        register(lazy=True)


def _install_python() -> None:
    import torch

    from . import device, serialization

    if not hasattr(torch, "ve"):
        torch._register_device_module("ve", device)
    _install_methods(torch)
    serialization.install()


def _install_methods(torch: Any) -> None:
    def tensor_ve(self: Any, device: Any = None, non_blocking: bool = False, memory_format: Any = None) -> Any:
        """This tensor on the VE (``device``: an index, ``"ve:N"`` or a torch.device; default: the current VE)."""
        options = {"memory_format": memory_format} if memory_format is not None else {}
        return self.to(_ve_device(device), non_blocking=non_blocking, **options)

    def module_ve(self: Any, device: Any = None) -> Any:
        """Move all parameters and buffers to the VE (like ``Module.cuda()``)."""
        return self._apply(lambda t: t.ve(device))

    if not hasattr(torch.Tensor, "ve"):
        torch.Tensor.ve = tensor_ve
    if not hasattr(torch.nn.Module, "ve"):
        torch.nn.Module.ve = module_ve
    if not hasattr(torch.Tensor, "is_ve"):
        torch.Tensor.is_ve = property(lambda self: self.device.type == "ve")


def _ve_device(device: Any) -> Any:
    import torch

    if device is None:
        return torch.device("ve", torch.ve.current_device())
    if isinstance(device, int):
        return torch.device("ve", device)
    device = torch.device(device)
    if device.type != "ve":
        raise ValueError(f"expected a VE device, got {device}")
    return device


def _fallback_policy(op: str) -> str | None:
    """Called by the extension before an op runs on the CPU: None lets it, a message refuses."""
    import sol

    if not sol.config[FALLBACK_NAME]:
        return (f"{op} has no VE kernel in SOL and sol.config['ve::cpu_fallback'] is False: move its inputs to the "
                f"CPU with .cpu() for this op, or allow the CPU fallback")
    fallback_counts[op] = fallback_counts.get(op, 0) + 1
    if op not in _warned:
        _warned.add(op)
        warnings.warn(f"{op} has no VE kernel: it runs on the CPU (its VE tensors are copied there and back; "
                      "sol.config['ve::cpu_fallback'] = False raises instead)", stacklevel=2)
    return None


# -- the build ----------------------------------------------------------------------------------------------------


def _key() -> str:
    import torch

    identity = "\0".join([*(p.read_text() for p in (*SOURCES, *HEADERS)), torch.__version__,
                          str(Path(torch.__file__).resolve().parent), sys.version])
    return hashlib.sha256(identity.encode()).hexdigest()


def _load() -> ModuleType:
    """The extension module: from SOL's cache, compiled there first (in a child process) if missing."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    import sol
    from sol.debug import progress

    def build(directory: Path) -> dict[str, str]:
        import torch

        with progress.compiling("PyTorch VE device", stages=("torch-ve",)):
            progress.stage("torch-ve")
            script = ("import sys; from torch.utils.cpp_extension import load; "
                      f"load(name={NAME!r}, sources={[str(p) for p in SOURCES]!r}, build_directory={str(directory)!r}, "
                      "extra_cflags=['-O2', '-w'], extra_ldflags=['-ldl'], verbose=False)")
            result = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, check=False)
            if result.returncode != 0:
                # the first compiler error leads: register()'s warning shows the first line
                first = next((line for line in result.stdout.splitlines() if "error" in line), "")
                raise RuntimeError(f"compiling PyTorch's VE device failed: {first.strip()} (kept in {directory}):\n"
                                   f"{result.stdout[-3000:]}")
        return {"torch": torch.__version__}

    entry = sol.cache.get_or_build(_key(), build)
    library = entry.file(f"{NAME}.so")
    loader = importlib.machinery.ExtensionFileLoader(NAME, str(library))
    spec = importlib.util.spec_from_file_location(NAME, str(library), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[NAME] = module
    return module
