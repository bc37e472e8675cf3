"""A stand-in for a `sol.runtime` compiled model that runs the numpy references through raw pointers.

It implements exactly the runtime API `SolModule` relies on, so the wrapper
is tested without a compiler: param_names, input_specs, output_specs,
output_shapes(batch), prepare(param_ptrs), run(input_ptrs, param_ptrs, output_ptrs, batch).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np
from sol.ir import Graph, Size
from sol.ir.interpret import run_reference


@dataclass(frozen=True)
class Spec:
    shape: tuple[Size, ...]
    dtype: str


def _view(pointer: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    count = int(np.prod(shape))
    buffer = (ctypes.c_byte * (count * dt.itemsize)).from_address(pointer)
    return np.frombuffer(buffer, dtype=dt, count=count).reshape(shape)


class FakeCompiled:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.param_names = list(graph.params)
        self.input_specs = [Spec(t.shape, t.dtype) for t in graph.inputs]
        self.output_specs = [Spec(t.shape, t.dtype) for t in graph.outputs]
        self.prepare_calls = 0

    def output_shapes(self, batch: int) -> list[tuple[int, ...]]:
        return [t.concrete_shape(batch) for t in self.graph.outputs]

    def prepare(self, param_ptrs: list[int]) -> None:
        self.prepare_calls += 1

    def run(self, input_ptrs: list[int], param_ptrs: list[int], output_ptrs: list[int], batch: int) -> None:
        inputs = [_view(p, t.concrete_shape(batch), t.dtype) for p, t in zip(input_ptrs, self.graph.inputs, strict=True)]
        params: dict[str, Any] = {name: _view(p, self.graph.params[name].concrete_shape(batch), self.graph.params[name].dtype)
                                  for name, p in zip(self.param_names, param_ptrs, strict=True)}
        results = run_reference(self.graph, inputs, params)
        for pointer, tensor, value in zip(output_ptrs, self.graph.outputs, results, strict=True):
            _view(pointer, tensor.concrete_shape(batch), tensor.dtype)[...] = value
