"""The op registry: the one place that knows an op.

For each op: its shape rule, its numpy reference (the oracle of every test
of passes, codegen and backends), its module preference (DNN: a library call
such as oneDNN; DFP: generated depth-first loop code) and its gradient rule
(``gradient(layer, grad_outputs, builder) -> grad_inputs``, emitting SOL IR
layers into the backward Graph; see `sol.autodiff`). A rule is given either
as a ``gradient`` staticmethod of the op's class or, for ops defined
elsewhere, with the `gradient` decorator.

Ops are defined in ``sol/ir/ops/*.py`` with the `op` decorator::

    @op("relu", module="DFP", elementwise=True)
    class Relu:
        @staticmethod
        def infer(inputs, attrs): return [inputs[0]]
        @staticmethod
        def reference(inputs, attrs): return [np.maximum(inputs[0], 0)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import SolUnsupportedError
from .graph import TensorType

InferFn = Callable[[Sequence[TensorType], dict[str, Any]], list[TensorType]]
ReferenceFn = Callable[[Sequence[np.ndarray], dict[str, Any]], list[np.ndarray]]
#: (layer, gradient of each output or None, backward-graph builder) -> gradient of each input or None
GradientFn = Callable[..., list[Any]]


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: InferFn
    reference: ReferenceFn
    module: str = "DFP"  # "DNN" or "DFP"
    elementwise: bool = False  # output[i] depends only on inputs[i] (with broadcasting): fusible into epilogues
    gradient: GradientFn | None = None
    doc: str = ""


_OPS: dict[str, OpDef] = {}


def op(name: str, *, module: str = "DFP", elementwise: bool = False) -> Callable[[type], type]:
    """Class decorator registering an op from a class with `infer`, `reference` (and `gradient`)."""
    if module not in ("DNN", "DFP"):
        raise ValueError(f"module must be DNN or DFP, not {module!r}")

    def register(cls: type) -> type:
        if name in _OPS:
            raise ValueError(f"op {name!r} registered twice")
        _OPS[name] = OpDef(
            name=name,
            infer=cls.infer,
            reference=cls.reference,
            module=module,
            elementwise=elementwise,
            gradient=getattr(cls, "gradient", None),
            doc=(cls.__doc__ or "").strip(),
        )
        return cls

    return register


def gradient(*names: str) -> Callable[[GradientFn], GradientFn]:
    """Attach a gradient rule to already registered ops (each op has at most one rule)."""

    def register(fn: GradientFn) -> GradientFn:
        for name in names:
            opdef = _OPS.get(name)
            if opdef is None:
                raise ValueError(f"gradient rule for unknown op {name!r}")
            if opdef.gradient is not None:
                raise ValueError(f"op {name!r} has a gradient rule already")
            _OPS[name] = replace(opdef, gradient=fn)
        return fn

    return register


def get_op(name: str, layer_name: str = "") -> OpDef:
    _load_builtin_ops()
    try:
        return _OPS[name]
    except KeyError:
        where = f" (layer {layer_name!r})" if layer_name else ""
        raise SolUnsupportedError(f"op {name!r}{where} is not in SOL's op registry") from None


def all_ops() -> dict[str, OpDef]:
    _load_builtin_ops()
    return dict(_OPS)


_loaded = False


def _load_builtin_ops() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from . import ops  # noqa: F401  (registers every built-in op)
