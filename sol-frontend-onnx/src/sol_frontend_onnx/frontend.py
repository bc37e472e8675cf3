"""`OnnxFrontend`: ONNX models (files or ModelProto) -> sol.ir.Graph -> `OnnxModel`."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import onnx
from onnx import defs
from sol.errors import SolError
from sol.ir import Graph
from sol.records import Frontend

from .importer import ImportResult
from .loading import import_model, is_onnx_path, load_model
from .model import OnnxModel


class OnnxFrontend(Frontend):
    name = "onnx"
    alias = "onnx"
    description = "ONNX models (.onnx files or onnx.ModelProto)"

    def __init__(self) -> None:
        # parse() and wrap() are two calls of sol.optimize; the import result travels between them here
        self._pending: dict[int, ImportResult] = {}
        self._lock = threading.Lock()

    def accepts(self, model: Any) -> bool:
        return is_onnx_path(model) or isinstance(model, onnx.ModelProto)

    def parse(self, model: Any, inputs: tuple[Any, ...], batch_size: int | None = None) -> Graph:
        imported = import_model(load_model(model), inputs, wildcard=True, batch_size=batch_size)
        with self._lock:
            self._pending[id(model)] = imported
        return imported.graph

    def wrap(self, model: Any, compiled: Any) -> OnnxModel:
        with self._lock:
            imported = self._pending.pop(id(model), None)
        if imported is None:
            raise SolError("OnnxFrontend.wrap called for a model that was not parsed by this frontend")
        return OnnxModel(compiled, imported)

    def versions(self) -> Mapping[str, str]:
        return {"onnx": onnx.__version__, "onnx-opset": str(defs.onnx_opset_version())}
