"""Input binding of `SolModule`: the call's arguments checked against, and fitted to, what a compiled model takes.

The dtype, device and shape of every input against the compiled model's specs (solving for the wildcard batch),
a SOL error naming the input otherwise; containers (a cache, a tuple) replaced by their tensors, and example values
torch.export compiled into the graph (None, Python scalars) checked to be the same; outputs rebuilt in the model's
structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from sol.errors import SolInputError
from sol.ir import BATCH, Size, solve_batch

from . import structured
from .capture import torch_dtype


def _spec_fields(spec: Any) -> tuple[tuple[Size, ...], str]:
    """(shape, numpy dtype name) of a runtime input/output spec (an object, a mapping or a pair)."""
    if isinstance(spec, dict):
        return tuple(spec["shape"]), str(spec["dtype"])
    if isinstance(spec, (tuple, list)):
        return tuple(spec[0]), str(spec[1])
    return tuple(spec.shape), str(spec.dtype)


def _describe(shape: Sequence[Size]) -> str:
    return "[" + ", ".join("batch" if s == BATCH else str(s) for s in shape) + "]"


def _expected(shape: Sequence[Size], dtype: torch.dtype) -> str:
    """The "expected ..." part of an input error (built only when there is an error: sympy makes it slow)."""
    return f"a {str(dtype).removeprefix('torch.')} tensor of shape {_describe(shape)}"


def _specialised(value: Any) -> bool:
    """Whether an example input is compiled into the graph instead of being an input of it (None, a Python scalar)."""
    return value is None or isinstance(value, (bool, int, float))



class InputBinding:
    """`SolModule`'s input checks and output structure (a mixin: the state lives in SolModule's ``_sol_*`` fields)."""

    def _batch(self, inputs: Sequence[Any], specs: Sequence[Any], device: str | None = None) -> int:
        if len(inputs) != len(specs):
            raise SolInputError(f"the optimized model takes {len(specs)} inputs, got {len(inputs)}")
        batch: int | None = None
        device = device or getattr(self._sol_compiled, "device_type", "cpu")
        for index, (value, (shape, dtype, static)) in enumerate(zip(inputs, self._spec_info(specs), strict=True)):
            if not isinstance(value, torch.Tensor):
                raise SolInputError(f"input {index}: expected {_expected(shape, dtype)}, got {type(value).__name__}")
            if value.dtype != dtype:
                raise SolInputError(f"input {index}: expected {_expected(shape, dtype)}, "
                                    f"got dtype {str(value.dtype).removeprefix('torch.')}")
            if value.device.type != device:
                raise SolInputError(self._device_mismatch(index, value, device))
            if static and value.shape == shape:  # the usual case: no batch dim to solve for
                continue
            if value.dim() != len(shape):
                raise SolInputError(f"input {index}: expected {_expected(shape, dtype)}, got shape {list(value.shape)}")
            for want, got in zip(shape, value.shape, strict=True):
                if isinstance(want, int):
                    ok = want == got
                else:
                    solved = solve_batch(want, got)
                    ok = solved is not None and batch in (None, solved)
                    batch = solved if ok else batch
                if not ok:
                    raise SolInputError(f"input {index}: expected {_expected(shape, dtype)}, got shape {list(value.shape)}")
        return batch if batch is not None else 1

    def _device_mismatch(self, index: int, value: torch.Tensor, device: str) -> str:
        runs_on = getattr(self._sol_compiled, "device", None)  # an offloaded model: its SOL device (e.g. ve:0)
        if runs_on is not None:
            return (f"input {index} is on device {value.device}, but the model runs on {runs_on} and takes {device} "
                    f"tensors (copied to {runs_on} per call); move the input to {device}")
        return (f"input {index} is on device {value.device}, but the model was optimized for {device}; "
                "move the input or optimize for that device")

    def _spec_info(self, specs: Sequence[Any]) -> list[tuple[tuple[Size, ...], torch.dtype, bool]]:
        """(shape, torch dtype, whether the shape is all ints) per spec; computed once per list of specs."""
        cache = self._sol_spec_cache
        entry = cache.get(id(specs))
        if entry is None or entry[0] is not specs:  # the entry keeps its list alive, so ids are not reused
            if len(cache) >= 8:  # callers that pass a new list per call (training) are not helped, but bounded
                cache.clear()
            info = []
            for spec in specs:
                shape, dtype = _spec_fields(spec)
                info.append((shape, torch_dtype(dtype), all(isinstance(s, int) for s in shape)))
            entry = cache[id(specs)] = (specs, info)
        return entry[1]

    def _structure(self, outputs: list[torch.Tensor], spec: Any) -> Any:
        if spec is not None:
            return pytree.tree_unflatten(outputs, spec)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _tensor_inputs(self, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """The inputs the compiled model takes: containers (a cache, a tuple) replaced by their tensors, without those
        that were None or Python scalars in sol.optimize's example (torch.export specialised the graph to them),
        which must have the same values now."""
        example = self._sol_flat_example
        inputs = structured.flatten(inputs)
        if example is None or len(inputs) != len(example) or all(not _specialised(e) for e in example):
            return inputs
        kept = []
        for index, (value, seen) in enumerate(zip(inputs, example, strict=True)):
            if not _specialised(seen):
                kept.append(value)
            elif not _specialised(value) or type(value) is not type(seen) or value != seen:
                raise SolInputError(f"input {index}: the model was optimized for {seen!r} here (compiled into the code), "
                                    f"got {type(value).__name__ if isinstance(value, torch.Tensor) else repr(value)}; "
                                    "optimize it again for that value")
        return tuple(kept)
