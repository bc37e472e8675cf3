"""What the user gave `sol.optimize` for each model input: an example array, a shape, or nothing.

Each input ends up with a concrete shape, a dtype and, where the first dim
is symbolic in the ONNX file (a ``dim_param`` or no size at all) or a
``sol.input`` has a 0, a wildcard dim that becomes SOL's batch
(`sol.ir.BATCH`). Example arrays are kept: the importer may need their
values (see `sol_frontend_onnx.importer`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from sol.errors import SolInputError
from sol.inputs import InputSpec as SolInputSpec

from .dtypes import contiguous, from_onnx, sol_dtype


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    #: the dim that is SOL's wildcard batch, or None
    wildcard: int | None = None


@dataclass
class InputPlan:
    specs: dict[str, InputSpec] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)


def declared(model: onnx.ModelProto, name: str) -> tuple[list[int | None], int]:
    """(sizes with None for symbolic dims, ONNX element type) of a graph input."""
    for vi in model.graph.input:
        if vi.name == name:
            ttype = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                raise SolInputError(f"model input {name!r} is not a tensor (sequences, maps and optionals are not supported)")
            sizes = [d.dim_value if d.HasField("dim_value") else None for d in ttype.shape.dim]
            return sizes, ttype.elem_type
    raise SolInputError(f"the model has no input {name!r}")


def plan_inputs(model: onnx.ModelProto, names: Sequence[str], examples: Sequence[Any], *, wildcard: bool,
                batch_size: int | None = None) -> InputPlan:
    """Match ``examples`` (positional, or one mapping by name) to the model inputs ``names``."""
    by_name = _by_name(names, examples)
    plan = InputPlan()
    batch_dim_param: str | None = None
    for name in names:
        sizes, elem_type = declared(model, name)
        first_symbolic = bool(sizes) and sizes[0] is None
        if first_symbolic and batch_dim_param is None:
            batch_dim_param = _dim_param(model, name)
        given = by_name.get(name)
        dtype = from_onnx(elem_type, f"model input {name!r}") if elem_type else None
        spec_wildcard: int | None = None
        if given is None:
            if any(s is None for s in sizes[1:]):
                raise SolInputError(f"model input {name!r} has symbolic dims {sizes}; pass an example array or a shape")
            shape = [s if s is not None else (batch_size or 1) for s in sizes]
        elif isinstance(given, SolInputSpec):
            shape = list(given.shape)
            if given.wildcard_dims:
                spec_wildcard = given.wildcard_dims[0]
                shape[spec_wildcard] = batch_size or 1
            if given.dtype is not None:
                dtype = sol_dtype(np.dtype(given.dtype), f"model input {name!r}")
        elif isinstance(given, (tuple, list)) and all(isinstance(s, (int, np.integer)) for s in given):
            shape = [int(s) for s in given]
        else:
            value = np.asarray(given)
            value_dtype = sol_dtype(value.dtype, f"model input {name!r}")
            if dtype is not None and value_dtype != dtype:
                raise SolInputError(f"model input {name!r} is {dtype} in the model, the example is {value_dtype}")
            dtype = value_dtype
            plan.values[name] = contiguous(value)
            shape = list(value.shape)
        if dtype is None:
            raise SolInputError(f"model input {name!r} has no element type; pass an example array")
        _check_shape(name, sizes, shape)
        chosen: int | None = None
        if wildcard:
            if spec_wildcard is not None:
                chosen = spec_wildcard
            elif first_symbolic and _dim_param(model, name) == batch_dim_param and not isinstance(given, (tuple, list)):
                chosen = 0
        plan.specs[name] = InputSpec(name, tuple(shape), dtype, chosen)
    return plan


def _by_name(names: Sequence[str], examples: Sequence[Any]) -> dict[str, Any]:
    if len(examples) == 1 and isinstance(examples[0], Mapping):
        mapping = dict(examples[0])
        unknown = sorted(set(mapping) - set(names))
        if unknown:
            raise SolInputError(f"the model has no inputs {unknown}; its inputs are {list(names)}")
        return mapping
    if len(examples) > len(names):
        raise SolInputError(f"the model takes {len(names)} inputs ({', '.join(names)}), got {len(examples)} examples")
    return dict(zip(names, examples, strict=False))


def _dim_param(model: onnx.ModelProto, name: str) -> str:
    for vi in model.graph.input:
        if vi.name == name and vi.type.tensor_type.shape.dim:
            return vi.type.tensor_type.shape.dim[0].dim_param
    return ""


def _check_shape(name: str, sizes: Sequence[int | None], shape: Sequence[int]) -> None:
    if not sizes:  # the model declares no shape (allowed by ONNX): anything goes
        return
    if len(sizes) != len(shape) or any(s is not None and s != g for s, g in zip(sizes, shape, strict=False)):
        want = ["?" if s is None else s for s in sizes]
        raise SolInputError(f"model input {name!r} has shape {want} in the model, got {list(shape)}")
