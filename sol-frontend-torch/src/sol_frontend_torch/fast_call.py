"""A plain inference call of a SolModule in one C++ function (native/tensor_reader.cpp, sol_fast_forward).

A model run leaves the CPU caches (and, on a virtual machine, the page-table
entries) of the interpreter cold, so every Python step of the next call pays
for them: checking the input and the parameters, allocating the output,
calling the forward through ctypes. Measured on two cores (bf16 models,
module call against the same forward called directly), that came to 116 us
per call on squeezenet1_1 (11% of it), 237 us on resnet18 (10%), 470 us on
resnet50 (6%) and 950 us on vit_b_16. One C++ function doing those steps ran
them 1-20% faster (``pytorch::fast_call`` on against off, paired rounds, bf16:
the transformer encoder 1.201x, resnet18 1.098x, mobilenet_v2 1.074x,
resnet50 1.041x, vit_b_16 1.014x; docs/debugging.md, "Time outside the
Clusters").

A call takes that way when it is a plain inference: one float32 CPU tensor in,
the shape of the last Python call, one float32 tensor out; autograd off
(``torch.no_grad``, ``torch.inference_mode``), no autocast, the module in
eval mode, no run listeners (debug mode, profiling), parameters neither
written nor replaced since they were prepared, and no other thread running
the model. Whatever else, the C++ function answers None and the Python path
of `SolModule.forward` runs, which checks and explains as always; after a
Python call that was plain, the struct is refreshed for the next.
``sol.config["pytorch::fast_call"] = False`` keeps every call in Python.
"""

from __future__ import annotations

import ctypes
from typing import Any

import sol
import torch
from sol.runtime.compiled import CompiledModel

from . import native_reader, params
from .settings import FAST_CALL_KEY

_MAX_DIMS = 8


#: sol.config["pytorch::fast_call"] as every struct reads it (kept current by a config hook): turning the key off
#: takes effect at the next call
_ENABLED = ctypes.c_int64(1)


def _follow(value: object) -> None:
    _ENABLED.value = int(bool(value))


class FastCallStruct(ctypes.Structure):
    """sol_fast_call of native/tensor_reader.cpp, field for field."""

    _fields_ = [
        ("enabled", ctypes.c_void_p), ("forward", ctypes.c_void_p), ("derived", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
        ("params", ctypes.c_void_p), ("versions", ctypes.c_void_p), ("pointers", ctypes.c_void_p),
        ("tensors", ctypes.c_void_p), ("lock", ctypes.c_void_p), ("listeners", ctypes.c_void_p),
        ("assignments", ctypes.c_void_p), ("assigned", ctypes.c_int64), ("batch", ctypes.c_int64),
        ("input_ndim", ctypes.c_int64), ("input_sizes", ctypes.c_int64 * _MAX_DIMS),
        ("output_ndim", ctypes.c_int64), ("output_sizes", ctypes.c_int64 * _MAX_DIMS),
    ]


class FastCall:
    """The struct for one compiled model, one input shape and one set of prepared parameters, and the objects it
    points into (kept alive here: the struct only borrows them)."""

    def __init__(self, function: Any, compiled: Any, arrays: Any, assigned: int, input_shape: tuple[int, ...],
                 output_shape: tuple[int, ...], batch: int) -> None:
        self.function = function
        self.arrays = arrays  # params._Arrays: the tensors, their prepared versions and pointers
        self.compiled = compiled
        self.forward = compiled.native_forward(batch)  # keeps the workspace and the lock the struct borrows
        self.listeners = compiled.run_listeners  # borrowed by the struct
        self.input_shape, self.batch = input_shape, batch
        s = self.struct = FastCallStruct()
        s.enabled = ctypes.addressof(_ENABLED)
        s.forward, s.derived, s.workspace = self.forward.function, self.forward.derived, self.forward.workspace
        s.params = ctypes.addressof(arrays.pointers)
        s.versions, s.pointers = arrays.versions_address, arrays.pointers_address
        s.tensors, s.lock, s.listeners = id(arrays.tensors), id(self.forward.lock), id(self.listeners)
        s.assignments, s.assigned = id(params._ASSIGNMENTS), assigned
        s.batch = batch
        s.input_ndim, s.output_ndim = len(input_shape), len(output_shape)
        for i, size in enumerate(input_shape):
            s.input_sizes[i] = size
        for i, size in enumerate(output_shape):
            s.output_sizes[i] = size
        self.address = ctypes.addressof(s)

    def __call__(self, x: Any) -> torch.Tensor | None:
        """The output of the model on ``x``, or None: take the Python path."""
        return self.function(x, self.address)

    def serves(self, compiled: Any, arrays: Any, input_shape: tuple[int, ...], batch: int) -> bool:
        """Whether this struct is still the one for a plain call with these (after a Python call)."""
        return (self.compiled is compiled and self.arrays is arrays and self.input_shape == input_shape
                and self.batch == batch
                and self.forward.workspace_owner is compiled.native_forward(batch).workspace_owner)


def plain(module: Any, compiled: Any, inputs: tuple[Any, ...], outputs: list[torch.Tensor], cast: Any) -> bool:
    """Whether the Python call that just ran was a plain inference (see the module docstring) on a host model."""
    return (len(inputs) == 1 and len(outputs) == 1 and cast is None and not module.training
            and not torch.is_grad_enabled() and not module._sol_grows
            and isinstance(inputs[0], torch.Tensor) and inputs[0].dtype == torch.float32
            and inputs[0].device.type == "cpu" and outputs[0].dtype == torch.float32
            and len(inputs[0].shape) <= _MAX_DIMS and outputs[0].dim() <= _MAX_DIMS
            and _leaf(module._sol_output_spec) and type(compiled) is CompiledModel  # in this process, on the host
            and not compiled.run_listeners)


def _leaf(spec: Any) -> bool:
    """Whether the output structure is the one tensor itself."""
    return spec is None or (hasattr(spec, "is_leaf") and spec.is_leaf())


def refresh(module: Any, compiled: Any, inputs: tuple[Any, ...], outputs: list[torch.Tensor], cast: Any,
            batch: int, current: FastCall | None) -> FastCall | None:
    """The FastCall for the next call like this plain one (``current``, the one before this call, where it still
    serves), or None where the call was not plain or the native helper is not loaded."""
    enabled = bool(sol.config[FAST_CALL_KEY.name])
    if _ENABLED.value != enabled:  # set before this module followed the key
        _follow(enabled)
    if not enabled or not plain(module, compiled, inputs, outputs, cast):
        return None
    slots = module._sol_params
    arrays = slots.native_arrays(compiled)  # the struct compares the tensors against what was prepared
    if arrays is None:
        return None
    input_shape = tuple(inputs[0].shape)
    if current is not None and current.serves(compiled, arrays, input_shape, batch):
        return current
    function = native_reader.fast_forward_function()
    if function is None:
        return None
    return FastCall(function, compiled, arrays, slots.assignment_count(), input_shape, tuple(outputs[0].shape), batch)


sol.config.on_change(FAST_CALL_KEY.name, _follow)
