"""The ``onnx`` frontend plugin: recognises ONNX models."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import sol
from sol.errors import SolUnsupportedError
from sol.records import Frontend


def _is_onnx_path(model: Any) -> bool:
    return isinstance(model, (str, os.PathLike)) and os.fspath(model).lower().endswith(".onnx")


class OnnxFrontend(Frontend):
    name = "onnx"
    alias = "onnx"
    description = "ONNX models (.onnx files or onnx.ModelProto)"

    def accepts(self, model: Any) -> bool:
        if _is_onnx_path(model):
            return True
        import onnx

        return isinstance(model, onnx.ModelProto)

    def parse(self, model: Any, inputs: tuple[Any, ...], batch_size: int | None = None) -> Any:
        raise SolUnsupportedError(
            "translating ONNX models into SOL's IR is not available in sol-frontend-onnx "
            f"{sol.__version__} yet; export the model from PyTorch and pass the torch.nn.Module instead"
        )

    def versions(self) -> Mapping[str, str]:
        import onnx
        from onnx import defs

        return {"onnx": onnx.__version__, "onnx-opset": str(defs.onnx_opset_version())}


@sol.hookimpl
def sol_frontends():
    return [OnnxFrontend()]
