"""ONNX graph -> `sol.ir.Graph`.

Every ONNX node is translated by a handler of `sol_frontend_onnx.handlers`
onto ops of SOL's registry. Layers whose inputs are all constants are
evaluated at import (with the ops' numpy references), so the shape
arithmetic of exported models (Shape -> Gather -> Concat -> Reshape) folds
into constants and the handlers see plain numbers.

Where a handler needs the *value* of a tensor (a Reshape's shape, a Slice's
starts) that is not a constant, the value is computed from the example
inputs and the model is specialised to it: such inputs are listed in
`ImportResult.specialized`, and the wrapper checks every later call against
them.

Float initializers become SOL parameters under their ONNX names; integer and
bool initializers (shapes, axes, indices) become constants, because the
graph's structure depends on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import sympy
from onnx import numpy_helper
from sol.errors import SolInputError, SolUnsupportedError
from sol.ir import BATCH, Dim, Graph, Purpose, Tensor, TensorType, get_op
from sol.ir.interpret import run_layer
from sol.passes.dead_layers import remove_dead_layers

from .dtypes import contiguous, sol_dtype
from .errors import NeedsStaticBatch
from .handlers import HANDLERS
from .handlers.sequence import TensorSequence
from .handlers.training import TRAINING_DOMAIN
from .inputs import InputPlan

#: operators of other domains than the default one that have handlers
OTHER_DOMAIN_OPS = {(TRAINING_DOMAIN, "Gradient")}


@dataclass
class ImportResult:
    graph: Graph
    #: ONNX names of the graph's inputs, in the order of `graph.inputs`
    feeds: list[str]
    #: ONNX names of every user input of the model (initializers excluded), in model order
    input_names: list[str]
    output_names: list[str]
    #: inputs whose values were baked into the graph, with those values
    specialized: dict[str, np.ndarray] = field(default_factory=dict)
    opset: int = 0


#: constants with more elements than this are passed as parameters instead of being compiled in
LARGE_CONSTANT = 1024


def opset_of(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def purposes_for(rank: int, batch_first: bool) -> list[Purpose]:
    """NC* images, [N, S, C] sequences, [N, C] features: the layout ONNX models use."""
    if rank == 0:
        return []
    if rank == 1:
        return [Purpose.N if batch_first else Purpose.C]
    if rank == 3:
        return [Purpose.N, Purpose.S, Purpose.C]
    return [Purpose.N, Purpose.C] + [Purpose.P] * (rank - 2)


class Importer:
    """The state of one import; handlers see it as their context (``ctx``)."""

    def __init__(self, model: onnx.ModelProto, plan: InputPlan) -> None:
        self.model = model
        self.plan = plan
        self.opset = opset_of(model)
        self.graph = Graph(model.graph.name or "onnx_model")
        self.values: dict[str, Tensor] = {}
        self.producers: dict[int, Any] = {}
        self.static_cache: dict[int, np.ndarray] = {}
        self.specialized: dict[str, np.ndarray] = {}
        self.node: onnx.NodeProto | None = None
        self.attrs: dict[str, Any] = {}

    # -- the API of handlers -----------------------------------------------------
    @property
    def where(self) -> str:
        node = self.node
        if node is None:
            return "<model>"
        return node.name or (node.output[0] if node.output else node.op_type)

    def unsupported(self, why: str) -> SolUnsupportedError:
        node = self.node
        op_type = node.op_type if node is not None else "?"
        return SolUnsupportedError(f"ONNX node {self.where!r} ({op_type}, opset {self.opset}): {why}")

    def input(self, index: int) -> Tensor | None:
        """The node's input ``index``; None when it is absent or given as "" (an omitted optional input)."""
        assert self.node is not None
        if index >= len(self.node.input) or not self.node.input[index]:
            return None
        return self.values[self.node.input[index]]

    def need(self, index: int) -> Tensor:
        tensor = self.input(index)
        if tensor is None:
            raise self.unsupported(f"input {index} is required")
        return tensor

    @property
    def inputs(self) -> list[Tensor | None]:
        assert self.node is not None
        return [self.input(i) for i in range(len(self.node.input))]

    @property
    def num_outputs(self) -> int:
        assert self.node is not None
        return len(self.node.output)

    def wants_output(self, index: int) -> bool:
        assert self.node is not None
        return index < len(self.node.output) and bool(self.node.output[index])

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def sattr(self, name: str, default: str) -> str:
        """A string attribute (ONNX stores bytes)."""
        value = self.attrs.get(name, default)
        return value.decode() if isinstance(value, bytes) else str(value)

    def const(self, value: Any, dtype: str | None = None, name: str = "const") -> Tensor:
        data = np.asarray(value, dtype=dtype)
        return self.graph.add_const(f"{self.where}_{name}", data)

    def layer(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> list[Tensor]:
        """Add a layer, or evaluate it right away when every input is a constant."""
        attrs = dict(attrs or {})
        if inputs and all(t.kind == "const" and t.data is not None for t in inputs) and not _symbolic(attrs):
            opdef = get_op(op, layer_name=self.where)
            types = opdef.infer([TensorType.of(t) for t in inputs], attrs)
            if all(_static_dims(tt.dims) for tt in types):
                results = opdef.reference([np.asarray(t.data) for t in inputs], attrs)
                return [self.graph.add_const(f"{self.where}_{op}", np.asarray(r, dtype=tt.dtype if tt.dtype != "bfloat16" else None))
                        for r, tt in zip(results, types, strict=True)]
        outs = self.graph.add_layer(op, inputs, attrs, name=self.where)
        for t in outs:
            self.producers[id(t)] = self.graph.layers[-1]
        return outs

    def one(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> Tensor:
        (out,) = self.layer(op, inputs, attrs)
        return out

    def static(self, tensor: Tensor, what: str = "this input") -> np.ndarray:
        """The value of ``tensor`` at import: a constant, a parameter, or computed from the example inputs."""
        cached = self.static_cache.get(id(tensor))
        if cached is not None:
            return cached
        if tensor.kind in ("const", "param") and tensor.data is not None:
            value = np.asarray(tensor.data)
        elif tensor.kind == "input":
            name = next(n for n, t in self.values.items() if t is tensor)
            example = self.plan.values.get(name)
            if example is None:
                raise self.unsupported(f"{what} must be known when the model is optimized: pass an example value for "
                                       f"the model input {name!r} (not only its shape)")
            self.specialized[name] = example
            value = example
        else:
            if not tensor.is_static:
                raise NeedsStaticBatch(f"{what} of node {self.where!r} depends on the batch size")
            layer = self.producers.get(id(tensor))
            if layer is None:
                raise self.unsupported(f"{what} must be a constant")
            args = [self.static(t, what) for t in layer.inputs]
            results = run_layer(layer, args)
            for out, result in zip(layer.outputs, results, strict=True):
                self.static_cache[id(out)] = np.asarray(result)
            value = self.static_cache[id(tensor)]
        self.static_cache[id(tensor)] = value
        return value

    def ints(self, tensor: Tensor | None, what: str = "this input") -> list[int] | None:
        if tensor is None:
            return None
        return [int(v) for v in np.asarray(self.static(tensor, what)).reshape(-1)]

    # -- the import ----------------------------------------------------------------
    def run(self) -> ImportResult:
        onnx_graph = self.model.graph
        initializers = {init.name: init for init in onnx_graph.initializer}
        for name, init in initializers.items():
            self._initializer(name, numpy_helper.to_array(init))
        input_names = [vi.name for vi in onnx_graph.input if vi.name not in initializers]
        for name in input_names:
            self.values[name] = self._graph_input(name)
        for node in onnx_graph.node:
            self._translate(node)
        self.node = None
        output_names = [vi.name for vi in onnx_graph.output]
        missing = [n for n in output_names if n not in self.values]
        if missing:
            raise SolUnsupportedError(f"the model's outputs {missing} are not produced by any node")
        if any(isinstance(self.values[n], TensorSequence) for n in output_names):
            raise SolUnsupportedError("sequence outputs are not supported (SOL returns tensors)")
        self.graph.outputs = [self.values[n] for n in output_names]
        remove_dead_layers(self.graph)
        self._large_constants_as_params()
        used = {id(t) for layer in self.graph.layers for t in layer.inputs} | {id(t) for t in self.graph.outputs}
        self.graph.inputs = [t for name, t in ((n, self.values[n]) for n in input_names)
                             if name not in self.specialized or id(t) in used]
        by_tensor = {id(self.values[n]): n for n in input_names}
        feeds = [by_tensor[id(t)] for t in self.graph.inputs]
        return ImportResult(self.graph, feeds, input_names, output_names, dict(self.specialized), self.opset)

    def _large_constants_as_params(self) -> None:
        """Big float constants (weights made by Constant / ConstantOfShape nodes) become parameters.

        Generated code embeds constants in its source; a network's weights would make that source
        gigabytes long. As parameters they are passed by pointer like initializers.
        """
        for layer in self.graph.layers:
            for t in layer.inputs:
                if (t.kind == "const" and t.data is not None and t.data.size > LARGE_CONSTANT
                        and t.dtype.startswith("float") and t.name not in self.graph.params):
                    t.kind = "param"
                    t.data = contiguous(t.data)
                    self.graph.params[t.name] = t

    def _initializer(self, name: str, data: np.ndarray) -> None:
        dtype = sol_dtype(data.dtype, f"initializer {name!r}")
        if dtype.startswith("float") and data.ndim > 0:
            self.values[name] = self.graph.add_param(name, contiguous(data), requires_grad=False)
        else:
            self.values[name] = self.graph.add_const(name, np.asarray(data))

    def _graph_input(self, name: str) -> Tensor:
        spec = self.plan.specs[name]
        batch_first = spec.wildcard is not None
        dims = []
        for i, (size, purpose) in enumerate(zip(spec.shape, purposes_for(len(spec.shape), batch_first), strict=True)):
            dims.append(Dim(BATCH if i == spec.wildcard else int(size), purpose))
        return self.graph.add_input(name, dims, spec.dtype)

    def _translate(self, node: onnx.NodeProto) -> None:
        self.node = node
        self.attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.domain not in ("", "ai.onnx") and (node.domain, node.op_type) not in OTHER_DOMAIN_OPS:
            raise self.unsupported(f"operators of domain {node.domain!r} are not supported (only the default domain)")
        handler = HANDLERS.get(node.op_type)
        if handler is None:
            raise self.unsupported("this operator is not supported by SOL")
        for name in node.input:
            if name and name not in self.values:
                raise self.unsupported(f"input {name!r} is not defined before the node (subgraphs are not supported)")
        try:
            result = handler(self)
        except NeedsStaticBatch:
            raise
        except SolUnsupportedError as error:
            if str(error).startswith("ONNX node"):
                raise
            raise self.unsupported(str(error)) from None
        except SolInputError:
            raise
        outputs = [result] if isinstance(result, (Tensor, TensorSequence)) else list(result)
        for index, name in enumerate(node.output):
            if not name:
                continue
            if index >= len(outputs) or outputs[index] is None:
                raise self.unsupported(f"output {index} ({name!r}) is not supported")
            self.values[name] = outputs[index]


def _symbolic(value: Any) -> bool:
    if isinstance(value, sympy.Basic):
        return not value.is_number
    if isinstance(value, (tuple, list)):
        return any(_symbolic(v) for v in value)
    if isinstance(value, dict):
        return any(_symbolic(v) for v in value.values())
    return False


def _static_dims(dims: Sequence[Dim]) -> bool:
    return all(isinstance(d.size, int) for d in dims)
