"""SOL's framework-free IR: Dim, Tensor, Layer, Graph.

Sizes are ints, or sympy expressions in the one batch symbol `BATCH` ("N")
when the model was optimized with a wildcard batch dimension. A dim keeps a
*purpose* (N batch, C channel/feature, P pixel/spatial, S sequence) so layers
can be written against purposes instead of positions.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import sympy

#: The wildcard batch size; generated code receives it as a runtime argument.
BATCH = sympy.Symbol("N", integer=True, positive=True)

Size = int | sympy.Expr


def as_size(value: Any) -> Size:
    """Normalise a size to an int when it is constant, else a sympy expression."""
    if isinstance(value, sympy.Basic):
        value = sympy.simplify(value)
        if value.is_Integer:
            return int(value)
        return value
    return int(value)


def is_static(size: Size) -> bool:
    return isinstance(size, int)


def evaluate(size: Size, batch: int) -> int:
    """A concrete size for a given batch."""
    if isinstance(size, int):
        return size
    return int(size.subs(BATCH, batch))


@functools.lru_cache(maxsize=256)
def solve_batch(size: Size, actual: int) -> int | None:
    """The positive integer batch that gives ``size`` the value ``actual`` (None: no single one does).

    Cached: sympy takes ~100 us a solve, and callers check the same input shapes at every call.
    """
    if isinstance(size, int):
        return None
    solutions = sympy.solve(sympy.Eq(size, int(actual)), BATCH)
    if len(solutions) == 1 and solutions[0].is_Integer and int(solutions[0]) >= 1:
        return int(solutions[0])
    return None


class Purpose(enum.Enum):
    N = "N"  # batch / none
    C = "C"  # channel / feature
    P = "P"  # pixel / spatial
    S = "S"  # sequence

    def __repr__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Dim:
    size: Size
    purpose: Purpose = Purpose.C

    def __repr__(self) -> str:
        return f"{self.purpose.value}{self.size}"


DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int8", "uint8", "bool")


@dataclass(eq=False)
class Tensor:
    """A value in the graph.

    ``dims`` are in the framework's logical order; ``layout`` is the order of
    the dims in memory (a permutation of ``range(len(dims))``; identity means
    plain row-major). ``kind`` is one of input, param, const, intermediate.
    ``data`` holds the value of constants (and of params where a pass needs it).
    """

    name: str
    dims: tuple[Dim, ...]
    dtype: str = "float32"
    kind: str = "intermediate"
    requires_grad: bool = False
    layout: tuple[int, ...] | None = None
    data: np.ndarray | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[Size, ...]:
        return tuple(d.size for d in self.dims)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def purposes(self) -> tuple[Purpose, ...]:
        return tuple(d.purpose for d in self.dims)

    @property
    def numel(self) -> Size:
        total: Any = 1
        for d in self.dims:
            total = total * d.size
        return as_size(total)

    @property
    def is_static(self) -> bool:
        return all(is_static(d.size) for d in self.dims)

    def concrete_shape(self, batch: int) -> tuple[int, ...]:
        return tuple(evaluate(d.size, batch) for d in self.dims)

    def __repr__(self) -> str:
        return f"Tensor({self.name}: {self.dtype}{list(self.dims)} {self.kind})"


@dataclass(frozen=True)
class TensorType:
    """Dims and dtype only: what shape rules consume and produce."""

    dims: tuple[Dim, ...]
    dtype: str = "float32"

    @property
    def shape(self) -> tuple[Size, ...]:
        return tuple(d.size for d in self.dims)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @staticmethod
    def of(tensor: Tensor) -> TensorType:
        return TensorType(tensor.dims, tensor.dtype)


@dataclass(eq=False)
class Layer:
    """One op of the registry applied to input tensors.

    ``name`` is where the layer came from in the user's model (e.g. the module
    path ``layer1.0.conv1``) so errors and debug output can point at it.
    """

    op: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    def __repr__(self) -> str:
        ins = ", ".join(t.name for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"Layer({self.name}: {outs} = {self.op}({ins}) {self.attrs})"


class Graph:
    """A model: inputs, parameters (framework names kept), outputs, layers in topological order."""

    def __init__(self, name: str = "model") -> None:
        self.name = name
        self.inputs: list[Tensor] = []
        self.params: dict[str, Tensor] = {}
        self.outputs: list[Tensor] = []
        self.layers: list[Layer] = []
        #: positions of outputs only SOL reads back (a training forward's saved activations): the planner may
        #: leave them in the layout their producer writes (reported in the compiled model's metadata)
        self.free_layout_outputs: set[int] = set()
        self._names: set[str] = set()
        self._counter = itertools.count()

    # -- construction ----------------------------------------------------
    def unique_name(self, hint: str) -> str:
        base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in hint) or "t"
        name = base
        while name in self._names:
            name = f"{base}_{next(self._counter)}"
        self._names.add(name)
        return name

    def add_input(self, name: str, dims: Sequence[Dim], dtype: str = "float32", requires_grad: bool = False) -> Tensor:
        t = Tensor(self.unique_name(name), tuple(dims), dtype, "input", requires_grad)
        self.inputs.append(t)
        return t

    def add_param(self, name: str, data: np.ndarray, purposes: Sequence[Purpose] | None = None, requires_grad: bool = True) -> Tensor:
        """A framework parameter/buffer; `name` is the framework's name (kept for state_dict)."""
        purposes = purposes or [Purpose.C] * data.ndim
        dims = tuple(Dim(int(s), p) for s, p in zip(data.shape, purposes, strict=True))
        t = Tensor(self.unique_name(name), dims, str(data.dtype), "param", requires_grad, data=data)
        self.params[name] = t
        return t

    def add_const(self, name: str, data: np.ndarray, purposes: Sequence[Purpose] | None = None) -> Tensor:
        purposes = purposes or [Purpose.C] * np.ndim(data)
        data = np.asarray(data)
        dims = tuple(Dim(int(s), p) for s, p in zip(data.shape, purposes, strict=True))
        return Tensor(self.unique_name(name), dims, str(data.dtype), "const", False, data=data)

    def add_layer(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None, name: str = "") -> list[Tensor]:
        """Append a layer; its outputs come from the op's shape rule."""
        from .registry import get_op

        opdef = get_op(op, layer_name=name)
        attrs = dict(attrs or {})
        types = opdef.infer([TensorType.of(t) for t in inputs], attrs)
        outs = [Tensor(self.unique_name(f"{name or op}_out{i}" if len(types) > 1 else (name or op)), tt.dims, tt.dtype)
                for i, tt in enumerate(types)]
        self.layers.append(Layer(op, list(inputs), outs, attrs, name or op))
        return outs

    # -- queries -----------------------------------------------------------
    def tensors(self) -> list[Tensor]:
        seen: dict[int, Tensor] = {}
        for t in itertools.chain(self.inputs, self.params.values()):
            seen[id(t)] = t
        for layer in self.layers:
            for t in itertools.chain(layer.inputs, layer.outputs):
                seen[id(t)] = t
        for t in self.outputs:
            seen[id(t)] = t
        return list(seen.values())

    def producers(self) -> dict[int, Layer]:
        return {id(t): layer for layer in self.layers for t in layer.outputs}

    def consumers(self) -> dict[int, list[Layer]]:
        out: dict[int, list[Layer]] = {}
        for layer in self.layers:
            for t in layer.inputs:
                out.setdefault(id(t), []).append(layer)
        return out

    @property
    def has_wildcard_batch(self) -> bool:
        return any(not t.is_static for t in self.inputs)

    def structural_hash(self) -> str:
        """A hash of everything that decides the generated code (not parameter values)."""
        h = hashlib.sha256()
        ids: dict[int, int] = {}

        def tid(t: Tensor) -> str:
            if id(t) not in ids:
                ids[id(t)] = len(ids)
            return f"{ids[id(t)]}:{t.kind}:{t.dtype}:{t.dims}:{t.layout}"

        for t in self.inputs:
            h.update(("in " + tid(t) + f" rg={t.requires_grad}\n").encode())
        for pname, t in sorted(self.params.items()):
            h.update((f"param {pname} " + tid(t) + "\n").encode())
        for layer in self.layers:
            h.update(f"{layer.op} {sorted((k, repr(v)) for k, v in layer.attrs.items())}".encode())
            for t in layer.inputs:
                h.update(tid(t).encode())
                if t.kind == "const" and t.data is not None:
                    h.update(np.ascontiguousarray(t.data).tobytes())
            h.update(b"->")
            for t in layer.outputs:
                h.update(tid(t).encode())
            h.update(b"\n")
        for t in self.outputs:
            h.update(("out " + tid(t) + "\n").encode())
        h.update(f"free layouts {sorted(self.free_layout_outputs)}".encode())
        return h.hexdigest()

    def __repr__(self) -> str:
        lines = [f"Graph {self.name}:"]
        lines += [f"  input {t!r}" for t in self.inputs]
        lines += [f"  param {n} -> {t!r}" for n, t in self.params.items()]
        lines += [f"  {layer!r}" for layer in self.layers]
        lines += [f"  output {t!r}" for t in self.outputs]
        return "\n".join(lines)


def replace_dims(tensor: Tensor, dims: Iterable[Dim]) -> Tensor:
    return replace(tensor, dims=tuple(dims))
