"""SOL's ONNX frontend: ONNX models -> sol.ir.Graph (`importer`) and back to a numpy callable (`OnnxModel`).

``sol.optimize("model.onnx", example)`` uses it through the ``onnx`` entry
point; `sol_frontend_onnx.backend` runs ONNX's backend test suite against
SOL; `sol_frontend_onnx.bench` loads .onnx files for the benchmarks.
"""

from __future__ import annotations

from .frontend import OnnxFrontend
from .model import OnnxModel, Parameters

__version__ = "0.1.0"

__all__ = ["OnnxFrontend", "OnnxModel", "Parameters", "__version__"]
