"""Model inputs and outputs that are framework objects holding tensors: transformers' caches (``DynamicCache``),
tuples and dicts of tensors, and keyword arguments.

torch.export flattens such inputs into their tensors (pytree leaves) and rebuilds such outputs from them, once the
object's class is registered as a pytree node; transformers registers its cache classes through
``register_cache_pytrees_for_model``. The compiled graph therefore takes the leaves, and a call flattens its
arguments the same way.

Generation with a cache (``use_cache=True``) calls the model with a cache that grows by a step each call: the
shapes change, so `SolModule` keeps one compiled model per input structure and shapes for models whose inputs or
outputs hold a cache (`holds_cache`), compiled on first use and cached like every artifact.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from sol.errors import SolInputError


def register_framework_pytrees(model: torch.nn.Module) -> None:
    """Let torch.export flatten the cache objects a transformers model takes and returns."""
    if not type(model).__module__.startswith("transformers."):
        return
    try:
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    except ImportError:  # older transformers: the DynamicCache registration of its ExecuTorch integration
        try:
            from transformers.integrations.executorch import register_dynamic_cache_export_support
        except ImportError:
            return
        register_dynamic_cache_export_support()
        return
    register_cache_pytrees_for_model(model)


_is_leaf = getattr(pytree, "tree_is_leaf", None) or pytree._is_leaf  # public from torch 2.8 on


def is_container(value: Any) -> bool:
    """A value torch.export flattens into tensors: a registered pytree node that is not a tensor."""
    return not isinstance(value, torch.Tensor) and value is not None and not isinstance(value, (bool, int, float, str)) \
        and not _is_leaf(value)


def flatten(values: Sequence[Any]) -> tuple[Any, ...]:
    """The inputs as the compiled graph takes them: containers replaced by their leaves, in pytree order."""
    if not any(is_container(v) for v in values):
        return tuple(values)
    flat: list[Any] = []
    for value in values:
        flat.extend(pytree.tree_leaves(value) if is_container(value) else [value])
    return tuple(flat)


def _is_cache(value: Any) -> bool:
    return type(value).__name__.endswith("Cache")


def holds_cache(example: Sequence[Any], output_spec: Any) -> bool:
    """Whether a model takes or returns a cache (transformers' ``*Cache`` classes): its shapes grow per call."""
    if any(_is_cache(v) for v in example if is_container(v)):
        return True
    pending = [output_spec] if output_spec is not None else []
    while pending:
        spec = pending.pop()
        if spec.type is not None and spec.type.__name__.endswith("Cache"):
            return True
        pending.extend(spec.children() if hasattr(spec, "children") else spec.children_specs)
    return False


def signature_key(values: Sequence[Any]) -> tuple[Any, ...]:
    """What selects a compiled model: each input's structure, shapes and dtypes (scalars and None by value)."""
    key: list[Any] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            key.append((tuple(value.shape), value.dtype, value.device))
        elif is_container(value):
            leaves, spec = pytree.tree_flatten(value)
            key.append((str(spec), tuple((tuple(t.shape), t.dtype) for t in leaves if isinstance(t, torch.Tensor))))
        else:
            key.append((type(value).__name__, value))
    return tuple(key)


def positional(model: torch.nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any],
               count: int) -> tuple[Any, ...]:
    """``inputs`` and ``kwargs`` as the positional arguments of ``model.forward``, at least ``count`` of them (the
    optimized example's), defaults filling the slots not given. Keywords forward has no slot for raise."""
    if not kwargs:
        return inputs
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError) as error:
        raise SolInputError(f"keyword arguments need forward's signature, which cannot be read: {error}") from None
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = [k for k in kwargs if k not in names]
    if unknown:
        raise SolInputError(f"keyword argument(s) {', '.join(unknown)}: {type(model).__name__}.forward has no "
                            f"parameter of that name that SOL can pass (its parameters: {', '.join(names)}); pass the "
                            "input by position or under one of those names")
    twice = [k for k in kwargs if names.index(k) < len(inputs)]
    if twice:
        raise SolInputError(f"{', '.join(twice)} given by position and by keyword")
    last = max([names.index(k) for k in kwargs] + [len(inputs) - 1, count - 1])
    values = list(inputs)
    for index in range(len(inputs), last + 1):
        name = names[index]
        if name in kwargs:
            values.append(kwargs[name])
        else:
            default = parameters[index].default
            values.append(None if default is inspect.Parameter.empty else default)
    return tuple(values)
