"""Walk an ExportedProgram's FX graph and build a `sol.ir.Graph`.

Each aten op is translated by a handler from `sol_frontend_torch.aten`; the
handlers receive resolved arguments (SOL Tensors for tensor nodes, SOL sizes
for SymInts). After every node the result is checked against torch's own
shape/dtype metadata, so a translation bug fails loudly at parse time.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from sol.errors import SolUnsupportedError
from sol.ir import Dim, Graph, Purpose, Size, Tensor, as_size
from torch.export.graph_signature import InputKind

from .aten import HANDLERS, IGNORED, SIZE_OPS, Context
from .aten.views import VIEW_WRITES, write_into_view
from .capture import Capture
from .symbols import SizeMapper


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def input_purposes(rank: int, wildcard: int | None) -> list[Purpose]:
    """Guess purposes for a user input: NC* images, [N, S, C] sequences, [N, C] features."""
    guess = {0: [], 1: [Purpose.C], 2: [Purpose.N, Purpose.C], 3: [Purpose.N, Purpose.S, Purpose.C]}.get(
        rank, [Purpose.N, Purpose.C] + [Purpose.P] * (rank - 2))
    if wildcard is not None:
        guess[wildcard] = Purpose.N
    return guess


def module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "<model>"
    path, cls = list(stack.values())[-1]
    cls_name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    return f"{path or '<model>'} ({cls_name.rsplit('.', 1)[-1]})"


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    # Shares memory with the framework tensor where possible: the graph's param data stays current.
    return tensor.detach().cpu().numpy()


#: name of the graph input that carries the (seed, step) key of random layers in training graphs
RNG_INPUT = "sol_rng_key"


class Converter(Context):
    def __init__(self, capture: Capture, model: torch.nn.Module, name: str, training: bool = False) -> None:
        self.graph = Graph(name)
        self.sizes = SizeMapper()
        self.capture = capture
        self.model = model
        self.training = training
        self.env: dict[torch.fx.Node, Any] = {}
        #: framework buffer name -> the value the model writes into it (in capture order)
        self.mutations: dict[str, Tensor] = {}
        self._rng: Tensor | None = None
        self._streams = 0
        #: view node -> the node it views (slices, selects, reshapes, permutes): where an in-place write goes too
        self.views: dict[torch.fx.Node, torch.fx.Node] = {}
        #: placeholder node -> the parameter or buffer it is (what a write into it updates)
        self.state: dict[torch.fx.Node, Tensor] = {}
        #: views whose base was written after they were taken
        self.stale: set[torch.fx.Node] = set()

    def mutate(self, state: Tensor, value: Tensor) -> None:
        names = [n for n, t in self.graph.params.items() if t is state]
        if not names:
            raise SolUnsupportedError(f"{self.where}: the model writes into a tensor that is not one of its buffers")
        self.mutations[names[0]] = value

    def written(self, name: str) -> Tensor | None:
        return self.mutations.get(name)

    def rng_key(self) -> Tensor:
        if self._rng is None:
            self._rng = Tensor(self.graph.unique_name(RNG_INPUT), (Dim(2, Purpose.C),), "int64", "input")
        return self._rng

    def rng_stream(self) -> int:
        self._streams += 1
        return self._streams

    # -- Context API used by the handlers --------------------------------------
    def size(self, value: Any) -> Size:
        return self.sizes.size(value)

    def const(self, value: Any, like: Tensor | None = None, name: str = "scalar") -> Tensor:
        if isinstance(value, Tensor):
            return value
        if isinstance(value, bool):
            data = np.array(value)
        elif isinstance(value, int):
            data = np.array(value, dtype=np.int64)
        else:  # Python floats are torch's default dtype, so they never widen a tensor
            data = np.array(float(value), dtype=np.float32)
        return self.graph.add_const(name, data)

    def layer(self, op: str, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None) -> list[Tensor]:
        return self.graph.add_layer(op, inputs, attrs, name=self.where)

    def meta_shape(self, node: torch.fx.Node | None = None) -> tuple[Size, ...]:
        val = (node or self.node).meta["val"]
        return self.sizes.shape(val.shape)

    # -- conversion ------------------------------------------------------------
    def run(self) -> Graph:
        program = self.capture.program
        specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
        user_index = 0
        for node in program.graph.nodes:
            self.node = node
            self.where = node.name
            if node.op == "placeholder":
                spec = specs[node.name]
                if spec.kind == InputKind.USER_INPUT:
                    self.env[node] = self._user_input(node, user_index)
                    user_index += 1
                else:
                    self.env[node] = self.state[node] = self._state(node, spec.kind, spec.target)
            elif node.op == "call_function":
                self.where = self._layer_name(node)
                self.env[node] = self._call(node)
            elif node.op == "output":
                self._outputs(node)
            else:
                raise SolUnsupportedError(f"FX node {node.op} {node.target} is not supported")
        if self._rng is not None:
            self.graph.inputs.append(self._rng)  # last, after the user's inputs
        self._drop_unused_params()
        return self.graph

    def _layer_name(self, node: torch.fx.Node) -> str:
        stack = node.meta.get("nn_module_stack") or {}
        path = list(stack.values())[-1][0] if stack else ""
        return path or node.name

    def _user_input(self, node: torch.fx.Node, index: int) -> Any:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return val  # a Python scalar input was specialised into the graph
        wildcard = self.capture.wildcard[index] if index < len(self.capture.wildcard) else None
        if wildcard is not None:
            self.sizes.bind_batch(val.shape[wildcard])
        shape = self.sizes.shape(val.shape)
        purposes = input_purposes(len(shape), wildcard)
        dims = [Dim(s, p) for s, p in zip(shape, purposes, strict=True)]
        return self.graph.add_input(node.name, dims, dtype_name(val.dtype), bool(val.requires_grad))

    def _state(self, node: torch.fx.Node, kind: InputKind, target: str | None) -> Tensor:
        assert target is not None
        program = self.capture.program
        if kind in (InputKind.PARAMETER, InputKind.BUFFER):
            if target in program.state_dict:
                value = program.state_dict[target]
            else:  # a non-persistent buffer lives only on the module
                value = program.constants.get(target, None)
                if value is None:
                    value = self.model.get_buffer(target)
            data = to_numpy(value)
            tensor = self.graph.add_param(target, data, requires_grad=bool(value.requires_grad))
            return tensor
        if kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            value = program.constants[target]
            if not isinstance(value, torch.Tensor):
                raise SolUnsupportedError(f"the constant {target!r} of type {type(value).__name__} is not supported")
            return self.graph.add_const(target, to_numpy(value).copy())
        raise SolUnsupportedError(f"model input {target!r} of kind {kind.name} is not supported (only inference graphs are)")

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            if value in self.stale:
                self._view_again(value)
            return self.env[value]
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: self._resolve(v) for k, v in value.items()}
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self.sizes.size(value)
        return value

    def _call(self, node: torch.fx.Node) -> Any:
        target = node.target
        val = node.meta.get("val")
        if target is operator.getitem:
            container, index = self._resolve(node.args[0]), node.args[1]
            return container[index]
        key = op_key(target)
        if key in SIZE_OPS or (val is not None and isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool)):
            return self.sizes.size(val)  # size arithmetic: torch already computed it symbolically
        if key in IGNORED:
            return None
        handler = HANDLERS.get(key) or (HANDLERS.get(key[:-1]) if in_place(key) and not key.startswith("__") else None)
        if handler is None:
            raise SolUnsupportedError(
                f"the PyTorch op {key} (in {module_path(node)}) is not supported by SOL. Replace that part of the model "
                "with supported ops, or run it outside of the optimized model: `torch.compile(model, backend=\"sol\")` "
                "does that for you, compiling the parts SOL supports and running the rest in eager; please report it "
                "so it can be added")
        args = self._resolve(node.args)
        kwargs = self._resolve(node.kwargs)
        try:
            result = handler(self, *args, **kwargs)
        except SolUnsupportedError as error:
            raise SolUnsupportedError(f"{key} in {module_path(node)}: {error}") from None
        if in_place(key) and args and isinstance(args[0], Tensor) and isinstance(node.args[0], torch.fx.Node):
            # In-place op: later readers of the mutated tensor, and of the tensors it is a view of, see the new value.
            result = self._check(node, key, result)
            self._write(node.args[0], result)
            self.views[node] = node.args[0]  # the op's result is its target: an alias of it
            return result
        if key in VIEW_WRITES:
            self.views[node] = node.args[0]  # type: ignore[assignment]
        return self._check(node, key, result)

    def _write(self, target: torch.fx.Node, value: Tensor) -> None:
        """``target`` now holds ``value``: so do the tensors it views (a slice written in place updates its base),
        up to the root; a buffer at the root records the model's write. Views of that root taken before the write
        would hold stale values: one read later is taken again (`_view_again`)."""
        chain = {target}
        while True:
            self.env[target] = value
            if target in self.state:
                self.mutate(self.state[target], value)  # a buffer update, e.g. BatchNorm's num_batches_tracked += 1
            base = self.views.get(target)
            if base is None:
                break
            value = write_into_view(self, target, self.env[base], value)
            target = base
            chain.add(target)
        for view in self.views:
            if view not in chain and self._root(view) is target:
                self.stale.add(view)

    def _view_again(self, view: torch.fx.Node) -> None:
        """A view read after its base was written: taken again from the base's new value (what PyTorch's shared
        memory gives)."""
        self.stale.discard(view)
        base = self._resolve(self.views[view])  # itself taken again first where it is a stale view
        key = op_key(view.target)
        if in_place(key):  # an in-place op's result is its target
            self.env[view] = base
            return
        node, where = self.node, self.where
        self.node, self.where = view, self._layer_name(view)
        try:
            args, kwargs = self._resolve(view.args[1:]), self._resolve(view.kwargs)
            self.env[view] = self._check(view, key, HANDLERS[key](self, base, *args, **kwargs))
        finally:
            self.node, self.where = node, where

    def _root(self, node: torch.fx.Node) -> torch.fx.Node:
        while node in self.views:
            node = self.views[node]
        return node

    def _check(self, node: torch.fx.Node, key: str, result: Any) -> Any:
        val = node.meta.get("val")
        if isinstance(result, Tensor) and isinstance(val, torch.Tensor):
            want = self.sizes.shape(val.shape)
            if len(want) != result.rank or any(as_size(a - b) != 0 for a, b in zip(want, result.shape, strict=True)):
                raise SolUnsupportedError(f"internal error translating {key} in {module_path(node)}: SOL computed shape "
                                          f"{list(result.shape)}, PyTorch {list(want)}")
            if dtype_name(val.dtype) != result.dtype:
                (result,) = self.layer("cast", [result], {"dtype": dtype_name(val.dtype)})
        return result

    def _outputs(self, node: torch.fx.Node) -> None:
        values = self._resolve(node.args[0])
        flat = list(values) if isinstance(values, (list, tuple)) else [values]
        outputs = []
        for value in flat:
            if not isinstance(value, Tensor):
                raise SolUnsupportedError(f"model output of type {type(value).__name__} is not supported; return tensors")
            outputs.append(value)
        self.graph.outputs = outputs

    def _drop_unused_params(self) -> None:
        used = {id(t) for layer in self.graph.layers for t in layer.inputs} | {id(t) for t in self.graph.outputs}
        used |= {id(t) for t in self.mutations.values()}
        self.graph.params = {name: t for name, t in self.graph.params.items() if id(t) in used}


#: the in-place operator overloads among aten's dunder ops (``__and__`` is not in place, ``__iand__`` is)
_IN_PLACE_DUNDERS = frozenset({"__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"})


def in_place(key: str) -> bool:
    """Whether an aten op writes into its first argument: ``add_`` does, ``__and__`` (a Python operator) does not."""
    if key.startswith("__") and key.endswith("__"):
        return key in _IN_PLACE_DUNDERS
    return key.endswith("_")


def op_key(target: Any) -> str:
    """"conv2d" for torch.ops.aten.conv2d.default: handlers work per op, overloads are told apart by arguments."""
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::", 1)[-1]
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::", 1)[-1]
    return getattr(target, "__name__", str(target))


def convert(capture: Capture, model: torch.nn.Module, name: str = "model") -> Graph:
    return Converter(capture, model, name).run()


def convert_training(capture: Capture, model: torch.nn.Module, name: str = "model") -> tuple[Graph, list[str]]:
    """A graph of the model in training mode whose outputs are the model's, then the buffers it writes.

    Returns the graph and the names of those buffers (one per extra output, in order).
    """
    converter = Converter(capture, model, name, training=True)
    graph = converter.run()
    graph.outputs = graph.outputs + list(converter.mutations.values())
    return graph, list(converter.mutations)
