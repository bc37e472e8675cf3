"""Execute a Graph with the ops' numpy references: the oracle for passes, codegen and backends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sympy

from ..errors import SolInputError
from .graph import BATCH, Graph, Layer, Tensor, solve_batch
from .registry import get_op


def infer_batch(graph: Graph, inputs: Sequence[np.ndarray]) -> int | None:
    """The concrete wildcard batch implied by ``inputs`` (None for a fully static graph)."""
    batch: int | None = None
    for tensor, value in zip(graph.inputs, inputs, strict=True):
        if value.ndim != tensor.rank:
            raise SolInputError(f"input {tensor.name!r} expects rank {tensor.rank} ({list(tensor.shape)}), got shape {list(value.shape)}")
        for dim, actual in zip(tensor.dims, value.shape, strict=True):
            if isinstance(dim.size, int):
                if dim.size != actual:
                    raise SolInputError(f"input {tensor.name!r} expects shape {list(tensor.shape)}, got {list(value.shape)}")
                continue
            solved = solve_batch(dim.size, actual)
            if solved is None or (batch is not None and solved != batch):
                raise SolInputError(f"input {tensor.name!r} shape {list(value.shape)} does not fit {list(tensor.shape)} for one batch size")
            batch = solved
    return batch


def resolve_attrs(value: Any, batch: int | None) -> Any:
    """Substitute the concrete batch into every sympy expression of an attribute value."""
    if isinstance(value, sympy.Basic):
        if batch is None:
            raise SolInputError(f"attribute {value} depends on the wildcard batch but no batch is known")
        return int(value.subs(BATCH, batch))
    if isinstance(value, tuple):
        return tuple(resolve_attrs(v, batch) for v in value)
    if isinstance(value, list):
        return [resolve_attrs(v, batch) for v in value]
    if isinstance(value, dict):
        return {k: resolve_attrs(v, batch) for k, v in value.items()}
    return value


def run_layer(layer: Layer, values: Sequence[np.ndarray], batch: int | None = None) -> list[np.ndarray]:
    opdef = get_op(layer.op, layer_name=layer.name)
    return opdef.reference(list(values), resolve_attrs(layer.attrs, batch))


def run_reference(graph: Graph, inputs: Sequence[np.ndarray], params: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Run ``graph`` on numpy ``inputs``; ``params`` (framework names) default to the data stored on the graph."""
    if len(inputs) != len(graph.inputs):
        raise SolInputError(f"graph {graph.name!r} takes {len(graph.inputs)} inputs, got {len(inputs)}")
    arrays = [np.asarray(x) for x in inputs]
    batch = infer_batch(graph, arrays)
    env: dict[int, np.ndarray] = {id(t): a for t, a in zip(graph.inputs, arrays, strict=True)}
    for name, tensor in graph.params.items():
        data = params[name] if params is not None and name in params else tensor.data
        if data is None:
            raise SolInputError(f"parameter {name!r} has no value; pass it in params")
        env[id(tensor)] = np.asarray(data)

    def value(t: Tensor) -> np.ndarray:
        if id(t) not in env:
            if t.data is None:
                raise SolInputError(f"tensor {t.name!r} is used before it is computed and holds no data")
            env[id(t)] = np.asarray(t.data)
        return env[id(t)]

    for layer in graph.layers:
        results = run_layer(layer, [value(t) for t in layer.inputs], batch)
        for tensor, result in zip(layer.outputs, results, strict=True):
            env[id(tensor)] = result
    return [value(t) for t in graph.outputs]
