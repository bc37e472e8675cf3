"""Evaluate layers whose inputs are all constants with the numpy reference, turning them into constants.

Only "const" tensors fold: parameters are the framework's and may change
(load_state_dict), so param-only layers stay in the graph (the codegen runs
them in the "prepare" program instead).
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ir.graph import Graph
from ..ir.interpret import run_layer
from ._rewrite import replace_uses


def _has_symbols(value: object) -> bool:
    if isinstance(value, sympy.Basic):
        return not value.is_number
    if isinstance(value, (tuple, list)):
        return any(_has_symbols(v) for v in value)
    if isinstance(value, dict):
        return any(_has_symbols(v) for v in value.values())
    return False


def fold_constants(graph: Graph) -> Graph:
    kept = []
    for layer in graph.layers:
        foldable = (layer.inputs and all(t.kind == "const" and t.data is not None for t in layer.inputs)
                    and all(t.is_static for t in layer.outputs) and not _has_symbols(layer.attrs))
        if not foldable:
            kept.append(layer)
            continue
        results = run_layer(layer, [np.asarray(t.data) for t in layer.inputs])
        for tensor, value in zip(layer.outputs, results, strict=True):
            const = graph.add_const(tensor.name, np.asarray(value, dtype=tensor.dtype), [d.purpose for d in tensor.dims])
            replace_uses(graph, tensor, const)
    graph.layers = kept
    return graph
