"""``torch.compile(model, backend="sol")``: the ``torch_dynamo_backends`` entry point.

Dynamo hands the backend a torch-level FX graph (``torch.relu``, ``Tensor.sigmoid``, ...). SOL captures it with
`sol_frontend_torch.capture` (torch.export, aten ops) like any model. Where every aten op of that capture has a
converter in SOL's registry (`sol_frontend_torch.aten.HANDLERS`), the whole graph is compiled with
``sol.optimize``. Otherwise the backend does what every torch.compile backend does with what it cannot compile:
the torch-level nodes whose aten ops SOL lacks (found through each aten node's ``from_node`` provenance) stay in
eager, torch.fx's `CapabilityBasedPartitioner` groups the rest into submodules, and each of those is compiled with
``sol.optimize`` (one that SOL still refuses, say for an attribute its converter does not take, runs in eager
too). Which ops fell back is logged once per set of ops (logger ``sol.dynamo``).

Training works through both: a SOL submodule is a `SolModule`, which is differentiable like the eager parts.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx.passes.operator_support
from sol import log

_log = log.get("dynamo")
#: the fallback messages logged so far (each is logged once per process)
_LOGGED: set[str] = set()


def sol_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable[..., Any]:
    """Compile the FX graph Dynamo captured: all of it with ``sol.optimize`` where SOL supports every op, else the
    supported parts (as SOL submodules of the returned GraphModule), leaving the rest to eager."""
    import sol
    from sol.errors import SolUnsupportedError

    fallback = unsupported_nodes(gm, example_inputs)
    if fallback is None:  # torch.export could not capture the graph at all
        return gm.forward
    if not fallback:
        try:
            optimized = sol.optimize(gm, *example_inputs)
        except SolUnsupportedError as error:  # a converter refused an op's arguments: run the graph in eager
            _log_once(f"torch.compile(backend='sol'): the graph runs in eager: {error}")
            return gm.forward

        def run(*args: Any) -> Any:
            result = optimized(*args)
            # Dynamo expects a tuple/list of outputs from a compiled graph.
            return result if isinstance(result, (tuple, list)) else (result,)

        run.sol_module = optimized  # type: ignore[attr-defined]
        return run
    return _partitioned(gm, example_inputs, fallback)


def supported_op(node: torch.fx.Node) -> bool:
    """Whether SOL's converter translates this aten node of a torch.export capture (see `convert.Converter._call`)."""
    from .aten import HANDLERS, IGNORED, SIZE_OPS
    from .convert import op_key

    if node.target is operator.getitem:
        return True
    key = op_key(node.target)
    val = node.meta.get("val")
    if key in SIZE_OPS or key in IGNORED or (isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool)):
        return True
    return key in HANDLERS or (key.endswith("_") and key[:-1] in HANDLERS)


def unsupported_nodes(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> dict[torch.fx.Node, set[str]] | None:
    """The nodes of Dynamo's graph ``gm`` that turn into aten ops SOL has no converter for, with those ops.

    Empty: SOL supports every op. None: torch.export could not capture ``gm`` (the reason is logged).
    """
    from .capture import capture
    from .convert import op_key

    try:
        program = capture(gm, example_inputs).program
    except Exception as error:  # the graph is fine for eager; only SOL's capture failed
        _log_once(f"torch.compile(backend='sol'): the graph runs in eager: torch.export cannot capture it: {error}")
        return None
    nodes = {node.name: node for node in gm.graph.nodes}
    fallback: dict[torch.fx.Node, set[str]] = {}
    unplaced: set[str] = set()
    for node in program.graph.nodes:
        if node.op != "call_function" or supported_op(node):
            continue
        origins = [nodes[name] for name in _origins(node, id(gm.graph)) if name in nodes]
        for origin in origins:
            fallback.setdefault(origin, set()).add(op_key(node.target))
        if not origins:
            unplaced.add(op_key(node.target))
    if unplaced:  # an op SOL lacks that no node of gm claims: keep every compute node in eager
        for node in gm.graph.nodes:
            if node.op in ("call_function", "call_method", "call_module"):
                fallback.setdefault(node, set()).update(unplaced)
    return fallback


def _origins(node: torch.fx.Node, graph_id: int) -> set[str]:
    """Names of the nodes of the graph ``graph_id`` that ``node`` was traced from (its ``from_node`` history)."""
    names: set[str] = set()
    stack = list(node.meta.get("from_node") or ())
    while stack:
        source = stack.pop()
        if getattr(source, "graph_id", None) == graph_id:
            names.add(source.name)
        else:
            stack.extend(getattr(source, "from_node", None) or ())
    return names


class _Supported(torch.fx.passes.operator_support.OperatorSupportBase):
    def __init__(self, fallback: dict[torch.fx.Node, set[str]]) -> None:
        self.fallback = fallback

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if node.op not in ("call_function", "call_method", "call_module") or node in self.fallback:
            return False
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and not self.is_node_supported(
                submodules, node.args[0]):
            return False  # picking an output of an eager node (sort's values) stays with it
        # values SOL computes are tensors; size arithmetic stays with the eager code that uses it
        return isinstance(node.meta.get("example_value"), torch.Tensor)


def _partitioned(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 fallback: dict[torch.fx.Node, set[str]]) -> torch.fx.GraphModule:
    import sol
    from sol.errors import SolError
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

    ops = sorted(set().union(*fallback.values()))
    where = sorted(node.name for node in fallback)
    _log_once(f"torch.compile(backend='sol'): SOL does not support the PyTorch op(s) {', '.join(ops)}; "
              f"{len(where)} node(s) of the graph run in eager ({', '.join(where[:8])}"
              f"{', ...' if len(where) > 8 else ''}), SOL compiles the rest")
    partitioner = CapabilityBasedPartitioner(gm, _Supported(fallback), allows_single_node_partition=False)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    names = [name for name, _ in fused.named_children() if name.startswith("fused_")]
    examples = _submodule_inputs(fused, names, example_inputs)
    for name in names:
        submodule = getattr(fused, name)
        try:
            setattr(fused, name, sol.optimize(submodule, *examples[name]))
        except Exception as error:  # never fail the user's model over a part SOL cannot take: eager runs it
            kind = "" if isinstance(error, SolError) else f"{type(error).__name__}: "
            _log_once(f"torch.compile(backend='sol'): part {name} runs in eager: {kind}{error}")
    return fused


def _submodule_inputs(fused: torch.fx.GraphModule, names: list[str], example_inputs: Sequence[Any]) -> dict[str, tuple]:
    """The arguments each fused submodule gets when ``fused`` runs on ``example_inputs`` (run once, in eager; with
    autograd on, so that which of them require a gradient is what training will see)."""
    seen: dict[str, tuple] = {}
    wanted = set(names)

    class Recorder(torch.fx.Interpreter):
        def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
            if target in wanted:
                seen[target] = tuple(args)
            return super().call_module(target, args, kwargs)

    Recorder(fused).run(*example_inputs)
    return seen


def _log_once(message: str) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        _log.warning("%s", message)
