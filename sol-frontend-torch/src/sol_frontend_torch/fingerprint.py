"""A cheap, conservative fingerprint of a torch.nn.Module and its example inputs (`Frontend.fingerprint`).

Two models with the same fingerprint must capture to the same graph, so it
covers everything torch.export would see except parameter values:

* per submodule: its path, class, training flag, the names/shapes/dtypes of
  its parameters and buffers, and every other attribute of its ``__dict__``
  (hyper-parameters such as stride or eps; plain tensor attributes by value,
  because export bakes them in as constants);
* per class in each module's MRO: the code of its functions, the identity
  (path, size, mtime) of the file that defines it, and everything the code
  reaches through its globals (helper functions recursively, modules and
  classes by their file identity, simple values by value);
* the inputs (shapes, dtypes, sol.input specs, scalars by value), batch_size,
  torch's version and default dtype, SOL's frontend sources.

Whatever cannot be described this way (hooks, an attribute of an unknown
type that forward might read, a class without a source file) makes the
fingerprint None: the model is then captured as usual.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from sol.graph_cache import source_tree_identity
from sol.inputs import InputSpec

from .structured import is_container

#: attributes of torch.nn.Module's own bookkeeping: covered separately, or irrelevant to the graph
_MODULE_INTERNALS = frozenset({
    "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "training",
    "_backward_pre_hooks", "_backward_hooks", "_is_full_backward_hook", "_forward_hooks",
    "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_state_dict_hooks", "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_sol_compiled_module",
})
_HOOKS = ("_backward_pre_hooks", "_backward_hooks", "_forward_hooks", "_forward_pre_hooks")
_SIMPLE = (int, float, str, bool, type(None), torch.dtype, torch.device, torch.Size, enum.Enum)
#: packages (besides the standard library) whose code is pinned by a version in the fingerprint
_VERSIONED = ("torch",)


class Unfingerprintable(Exception):
    """Something the fingerprint cannot describe safely: capture the model instead."""


def fingerprint(model: torch.nn.Module, inputs: tuple[Any, ...], batch_size: int | None) -> str | None:
    if _has_global_hooks():
        return None
    h = hashlib.sha256()
    try:
        for part in _parts(model, inputs, batch_size):
            h.update(part.encode())
            h.update(b"\0")
    except Unfingerprintable:
        return None
    return h.hexdigest()


def _has_global_hooks() -> bool:
    from torch.nn.modules import module as nn_module

    return any(getattr(nn_module, name, None) for name in (
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
        "_global_backward_pre_hooks"))


def _parts(model: torch.nn.Module, inputs: tuple[Any, ...], batch_size: int | None) -> Iterator[str]:
    yield f"python {sys.version} torch {torch.__version__} default {torch.get_default_dtype()} frontend {_frontend_identity()}"
    yield f"batch_size {batch_size!r}"
    for value in inputs:
        yield "input " + _input(value)
    code = _CodeWalker()
    for path, module in model.named_modules(remove_duplicate=False):
        if any(getattr(module, hooks, None) for hooks in _HOOKS):
            raise Unfingerprintable(f"{path}: module hooks")
        yield f"module {path!r} {_class_name(type(module))} training={module.training}"
        for name, tensor in list(module._parameters.items()) + list(module._buffers.items()):
            yield f"  state {name} " + ("None" if tensor is None else _tensor_type(tensor))
        yield f"  non-persistent {sorted(module._non_persistent_buffers_set)}"
        for name, value in sorted(vars(module).items()):
            if name not in _MODULE_INTERNALS:
                yield f"  attr {name} = {code.value(value)}"
        for cls in type(module).__mro__:
            code.cls(cls)
    yield from code.parts


def _input(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return _tensor_type(value)
    if isinstance(value, InputSpec):
        return f"spec {value.shape!r} {value.dtype!r} {value.wildcard_dims!r} {value.requires_grad!r}"
    if isinstance(value, (int, float, bool)) or value is None:  # scalars are specialised into the graph
        return f"{type(value).__name__} {value!r}"
    if is_container(value):  # its structure (class, keys, layout) and its tensors' types
        leaves, spec = pytree.tree_flatten(value)
        return f"tree {spec} [" + ", ".join(_input(leaf) for leaf in leaves) + "]"
    raise Unfingerprintable(f"input of type {type(value).__name__}")


def _tensor_type(tensor: torch.Tensor) -> str:
    return f"{tuple(tensor.shape)} {tensor.dtype} {tensor.device.type} rg={tensor.requires_grad}"


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


#: the frontend sources that decide a parsed graph (not the runtime wrapper or training, which run after it)
_GRAPH_SOURCES = ("aten", "capture.py", "convert.py", "symbols.py", "frontend.py", "fingerprint.py")


@functools.cache
def _frontend_identity() -> str:
    here = Path(__file__).parent
    return source_tree_identity(*(here / part for part in _GRAPH_SOURCES))


def _versioned(module_name: str) -> bool:
    """Code pinned by the torch or Python version (both are part of the fingerprint)."""
    top = module_name.split(".", 1)[0]
    return top in _VERSIONED or top in sys.stdlib_module_names


def _file_identity(module_name: str) -> str:
    """A module's source file by (path, size, mtime): any edit of it changes the fingerprint."""
    if _versioned(module_name):
        return module_name
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path:
        raise Unfingerprintable(f"module {module_name} has no source file")
    st = os.stat(path)
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


class _CodeWalker:
    """Describes classes, functions and globals once each, collecting the text in ``parts``."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._seen: set[int] = set()

    def cls(self, cls: type) -> None:
        if id(cls) in self._seen or _versioned(cls.__module__):
            return
        self._seen.add(id(cls))
        self.parts.append(f"class {_class_name(cls)} file {_file_identity(cls.__module__)}")
        for name, member in sorted(vars(cls).items()):
            function = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if isinstance(function, property):
                for accessor in (function.fget, function.fset):
                    if accessor is not None:
                        self.function(accessor)
            elif isinstance(function, types.FunctionType):
                self.function(function)
            elif not name.startswith("__"):
                self.parts.append(f"  classattr {name} = {self.value(function)}")

    def function(self, function: types.FunctionType) -> None:
        if id(function) in self._seen:
            return
        self._seen.add(id(function))
        if function.__module__ and _versioned(function.__module__):
            self.parts.append(f"function {function.__module__}.{function.__qualname__}")
            return
        code = function.__code__
        digest = _code_digest(code)
        self.parts.append(f"function {function.__qualname__} {digest} defaults {self.value(function.__defaults__)}")
        for cell in function.__closure__ or ():
            self.parts.append(f"  closure {self.value(cell.cell_contents)}")
        for name in _global_names(code):
            if name in function.__globals__:
                self.parts.append(f"  global {name} = {self.value(function.__globals__[name])}")

    def value(self, value: Any) -> str:
        """A description of a value forward might read; raises Unfingerprintable for what it cannot describe."""
        if isinstance(value, _SIMPLE):
            return f"{type(value).__name__}:{value!r}"
        if isinstance(value, (tuple, list)):
            return f"{type(value).__name__}[" + ",".join(self.value(v) for v in value) + "]"
        if isinstance(value, (set, frozenset)):
            return f"{type(value).__name__}{{" + ",".join(sorted(self.value(v) for v in value)) + "}"
        if isinstance(value, dict):
            return "dict{" + ",".join(f"{self.value(k)}:{self.value(v)}" for k, v in value.items()) + "}"
        if isinstance(value, torch.Tensor):  # a plain tensor attribute: exported as a constant, so its value counts
            data = value.detach().cpu().contiguous()
            return f"tensor {_tensor_type(value)} {hashlib.sha256(data.view(torch.uint8).numpy().tobytes()).hexdigest()}"
        if isinstance(value, types.ModuleType):
            return f"module {value.__name__} {_file_identity(value.__name__)}"
        if isinstance(value, type):
            self.cls(value)
            return f"class {_class_name(value)}"
        if isinstance(value, types.FunctionType):
            self.function(value)
            return f"function {value.__module__}.{value.__qualname__}"
        if isinstance(value, functools.partial):
            return f"partial({self.value(value.func)}, {self.value(value.args)}, {self.value(value.keywords)})"
        if isinstance(value, (types.BuiltinFunctionType, types.MethodWrapperType, torch._ops.OpOverloadPacket,
                              torch._ops.OpOverload)):
            return f"builtin {getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
        if isinstance(value, types.MethodType):
            return f"method {self.value(value.__func__)} of {type(value.__self__).__qualname__}"
        if isinstance(value, torch.nn.Module):  # a submodule kept outside _modules is described by its class
            self.cls(type(value))
            return f"module-object {_class_name(type(value))}"
        if _versioned(type(value).__module__) and " at 0x" not in repr(value):
            return f"{_class_name(type(value))}:{value!r}"  # e.g. a namedtuple's field accessor
        raise Unfingerprintable(f"a value of type {type(value).__qualname__}")


def _code_digest(code: types.CodeType) -> str:
    """A hash of what a code object does. Not marshal.dumps: its output depends on reference counts."""
    h = hashlib.sha256(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, code.co_argcount,
                   code.co_kwonlyargcount, code.co_posonlyargcount, code.co_flags)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            h.update(_code_digest(const).encode())
        elif isinstance(const, frozenset):  # `x in {...}` constants: their repr order follows string hashing
            h.update(f"frozenset:{sorted(map(repr, const))}".encode())
        else:
            h.update(f"{type(const).__name__}:{const!r}".encode())
    return h.hexdigest()


def _global_names(code: types.CodeType) -> Iterator[str]:
    """Names a code object (and the functions/comprehensions nested in it) may load from its globals."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)
