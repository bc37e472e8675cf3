"""SOL's PyTorch frontend: torch.nn.Module -> sol.ir.Graph (torch.export) and back (`SolModule`)."""

from __future__ import annotations

from .frontend import TorchFrontend

__version__ = "0.1.0"

__all__ = ["TorchFrontend", "__version__"]
