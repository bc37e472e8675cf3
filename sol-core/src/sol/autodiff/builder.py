"""The backward-graph builder that gradient rules write into (`sol.ir.ops._grad.GradBuilder`).

It owns the backward Graph and decides where forward values come from:
parameters become parameters of the backward graph (same framework names,
so the frontend passes the same tensors), constants are shared, and every
other forward value a rule reads becomes a *saved* input of the backward
graph, which the training forward then returns as an extra output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import Graph, Tensor


class Builder:
    def __init__(self, forward: Graph, requires: set[int], name: str) -> None:
        self.graph = Graph(name)
        self._param_names = {id(t): n for n, t in forward.params.items()}
        self._requires = requires
        self._values: dict[int, Tensor] = {}
        #: (forward tensor, backward input) for every saved value, in backward-input order
        self.saved: list[tuple[Tensor, Tensor]] = []
        #: name of the forward layer whose rule runs (names the backward layers after it)
        self.where = ""

    # -- the GradBuilder protocol -------------------------------------------------
    def fwd(self, tensor: Tensor) -> Tensor:
        if tensor.kind == "const":
            return tensor
        known = self._values.get(id(tensor))
        if known is not None:
            return known
        name = self._param_names.get(id(tensor))
        if name is not None:
            value = Tensor(self.graph.unique_name(tensor.name), tensor.dims, tensor.dtype, "param", False, data=tensor.data)
            self.graph.params[name] = value
        else:
            value = self.graph.add_input(f"saved_{tensor.name}", tensor.dims, tensor.dtype)
            self.saved.append((tensor, value))
        self._values[id(tensor)] = value
        return value

    def wants(self, tensor: Tensor) -> bool:
        return id(tensor) in self._requires

    def layer(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> list[Tensor]:
        return self.graph.add_layer(op, inputs, attrs, name=f"{self.where}.grad" if self.where else "grad")

    def one(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> Tensor:
        (out,) = self.layer(op, inputs, attrs)
        return out

    def const(self, value: float, dtype: str) -> Tensor:
        return self.graph.add_const("grad_const", np.array(value, dtype=dtype))

    def array(self, value: np.ndarray) -> Tensor:
        return self.graph.add_const("grad_const", np.asarray(value))
