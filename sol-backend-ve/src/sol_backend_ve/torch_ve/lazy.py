"""The VE device's start on first use: Python kernels for the VE key that start it, then dispatch again.

Registering torch.ve happens at import time (PyTorch's autoload inside ``import torch``, ``import sol_backend_ve``,
``import sol.pytorch``), where nothing may be built. Until the C++ extension is loaded, the two ops every VE tensor
is born from (``empty.memory_format``, ``empty_strided``: ``torch.ones(device="ve")``, ``.to("ve")``, ``.ve()``)
have Python kernels for the VE key here: the first call loads the extension (compiling it first if SOL's cache
lacks it), these kernels are removed so the extension's own take their place, and the call runs again.
"""

from __future__ import annotations

from typing import Any

#: the ops that create VE tensors, as (name, overload)
OPS = (("empty", "memory_format"), ("empty_strided", "default"))
_library: Any = None


def install(start: Any) -> None:
    """Route the first VE tensor creation through ``start()`` (returns whether the VE can be used)."""
    global _library
    if _library is not None:
        return
    import torch

    from . import reason

    library = torch.library.Library("aten", "IMPL")

    def trampoline(name: str, overload: str) -> Any:
        def kernel(*args: Any, **kwargs: Any) -> Any:
            if not start():
                raise RuntimeError(f"the VE cannot be used from PyTorch: {reason()}")
            return getattr(getattr(torch.ops.aten, name), overload)(*args, **kwargs)

        return kernel

    for name, overload in OPS:
        qualified = name if overload == "default" else f"{name}.{overload}"
        library.impl(qualified, trampoline(name, overload), "VE")
    _library = library


def remove() -> None:
    """Drop the Python kernels (before the extension registers its own for the same ops)."""
    global _library
    if _library is not None:
        _library._destroy()
        _library = None
