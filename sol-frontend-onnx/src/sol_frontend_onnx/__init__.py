"""SOL's ONNX frontend: ONNX models -> sol.ir.Graph (`importer`) and back to a numpy callable (`OnnxModel`).

``sol.optimize("model.onnx", example)`` uses it through the ``onnx`` entry
point; `sol_frontend_onnx.backend` runs ONNX's backend test suite against
SOL; `sol_frontend_onnx.bench` loads .onnx files for the benchmarks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .frontend import OnnxFrontend

if TYPE_CHECKING:
    from .model import OnnxModel, Parameters

__version__ = "0.1.0"

__all__ = ["OnnxFrontend", "OnnxModel", "Parameters", "__version__"]


def __getattr__(name: str) -> Any:
    # the model classes import onnx; the plugin loader imports this package, so they load on first use
    if name in ("OnnxModel", "Parameters"):
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
