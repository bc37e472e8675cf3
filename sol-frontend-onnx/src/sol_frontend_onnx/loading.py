"""Reading ONNX models from files or protos, and importing them (with the wildcard-batch fallback)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
from sol.errors import SolInputError

from .errors import NeedsStaticBatch
from .importer import Importer, ImportResult
from .inputs import plan_inputs


def is_onnx_path(model: Any) -> bool:
    return isinstance(model, (str, os.PathLike)) and os.fspath(model).lower().endswith(".onnx")


def load_model(model: onnx.ModelProto | str | os.PathLike[str]) -> onnx.ModelProto:
    """The ModelProto of ``model`` (a proto is returned as is; a path is read with its external data)."""
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(os.fspath(model))
    if not path.is_file():
        raise SolInputError(f"ONNX model file {str(path)!r} does not exist")
    return onnx.load(str(path))


def user_inputs(model: onnx.ModelProto) -> list[str]:
    """Names of the graph inputs the caller feeds (inputs that are also initializers have defaults)."""
    initializers = {init.name for init in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in initializers]


def import_model(model: onnx.ModelProto, examples: Sequence[Any], *, wildcard: bool = True,
                 batch_size: int | None = None) -> ImportResult:
    """Import with a wildcard batch where the model allows it, else with the batch of the examples."""
    names = user_inputs(model)
    if wildcard:
        plan = plan_inputs(model, names, examples, wildcard=True, batch_size=batch_size)
        if any(spec.wildcard is not None for spec in plan.specs.values()):
            try:
                return Importer(model, plan).run()
            except NeedsStaticBatch:
                pass  # shape arithmetic on the batch: fall back to the batch of the examples
    plan = plan_inputs(model, names, examples, wildcard=False, batch_size=batch_size)
    return Importer(model, plan).run()
