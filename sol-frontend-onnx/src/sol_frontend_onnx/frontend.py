"""`OnnxFrontend`: ONNX models (files or ModelProto) -> sol.ir.Graph -> `OnnxModel`.

This module is what the plugin loader imports, so it must stay cheap: onnx
and the importer (a quarter of a second) are imported only when an ONNX
model is actually handled, not on every `sol.optimize` of another framework's model.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sol.errors import SolError
from sol.records import Frontend

if TYPE_CHECKING:
    from sol.ir import Graph

    from .importer import ImportResult
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
        if isinstance(model, (str, os.PathLike)):
            return os.fspath(model).lower().endswith(".onnx")
        onnx = sys.modules.get("onnx")  # a ModelProto exists only once onnx is imported
        return onnx is not None and isinstance(model, onnx.ModelProto)

    def parse(self, model: Any, inputs: tuple[Any, ...], batch_size: int | None = None) -> Graph:
        from .loading import import_model, load_model

        imported = import_model(load_model(model), inputs, wildcard=True, batch_size=batch_size)
        with self._lock:
            self._pending[id(model)] = imported
        return imported.graph

    def wrap(self, model: Any, compiled: Any) -> OnnxModel:
        from .model import OnnxModel

        with self._lock:
            imported = self._pending.pop(id(model), None)
        if imported is None:
            raise SolError("OnnxFrontend.wrap called for a model that was not parsed by this frontend")
        return OnnxModel(compiled, imported)

    def versions(self) -> Mapping[str, str]:
        import onnx
        from onnx import defs

        return {"onnx": onnx.__version__, "onnx-opset": str(defs.onnx_opset_version())}
