"""Capture a torch.nn.Module with torch.export, given example tensors, scalars or `sol.input` specs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from sol.errors import SolUnsupportedError
from sol.inputs import InputSpec
from torch.export import Dim, ExportedProgram

from .structured import is_container, register_framework_pytrees

DEFAULT_WILDCARD_BATCH = 2  # 1 would be specialised by torch.export (0/1 sizes are never symbolic)


@dataclass
class Capture:
    program: ExportedProgram
    #: per user input: the index of its wildcard (batch) dim, or None
    wildcard: list[int | None]
    example_inputs: tuple[Any, ...]


def torch_dtype(dtype: Any) -> torch.dtype:
    """A torch dtype from a torch dtype, numpy dtype or name (None: float32)."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    import numpy as np

    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    result = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(result, torch.dtype):
        raise SolUnsupportedError(f"dtype {dtype!r} is not a known torch dtype")
    return result


def example_for(value: Any, batch_size: int | None) -> tuple[Any, int | None]:
    """An example value for torch.export and the index of its wildcard dim."""
    if isinstance(value, InputSpec):
        wildcard = value.wildcard_dims[0] if value.wildcard_dims else None
        batch = batch_size if batch_size and batch_size >= DEFAULT_WILDCARD_BATCH else DEFAULT_WILDCARD_BATCH
        shape = [batch if i == wildcard else s for i, s in enumerate(value.shape)]
        dtype = torch_dtype(value.dtype)
        example = torch.randn(shape, dtype=dtype) if dtype.is_floating_point else torch.zeros(shape, dtype=dtype)
        return example.requires_grad_(value.requires_grad and dtype.is_floating_point), wildcard
    if isinstance(value, torch.Tensor) or isinstance(value, (int, float, bool)) or value is None or is_container(value):
        return value, None
    raise SolUnsupportedError(f"model input of type {type(value).__name__} is not supported; pass a torch.Tensor, "
                              "a Python scalar, sol.input([...]) or a container of tensors torch.export can flatten "
                              "(torch.utils._pytree)")


@contextlib.contextmanager
def _export_mode() -> Iterator[None]:
    # nn.TransformerEncoder's fused fast path is an opaque kernel; without it the layers decompose into ops SOL knows.
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def capture(model: torch.nn.Module, inputs: Sequence[Any], batch_size: int | None = None,
            device: torch.device | None = None) -> Capture:
    """``device``: where the model's parameters are, when that is not where the example tensors are (a model moved
    to the VE after sol.optimize): torch.export runs the model there, so the examples move there."""
    register_framework_pytrees(model)
    examples, wildcard = [], []
    for value in inputs:
        example, dim = example_for(value, batch_size)
        if device is not None and isinstance(example, torch.Tensor) and example.device != device:
            example = example.detach().to(device).requires_grad_(example.requires_grad)
        examples.append(example)
        wildcard.append(dim)
    dynamic: list[Any] = []
    batch = Dim("batch", min=1) if any(d is not None for d in wildcard) else None
    if batch is not None and any(is_container(e) for e in examples):
        raise SolUnsupportedError("a wildcard batch (sol.input) together with inputs that hold tensors (a cache, a "
                                  "tuple) is not supported; give example tensors of the sizes to compile for")
    for example, dim in zip(examples, wildcard, strict=True):
        if isinstance(example, torch.Tensor):
            dynamic.append({dim: batch} if dim is not None else {})
        else:
            dynamic.append(None)
    with _export_mode():
        program = torch.export.export(model, tuple(examples), dynamic_shapes=tuple(dynamic) if batch is not None else None, strict=False)
    return Capture(program, wildcard, tuple(examples))
