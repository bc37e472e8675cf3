"""``import sol.onnx as sol``: SOL's API for ONNX users (needs sol-frontend-onnx).

``sol`` itself plus a check that the ONNX frontend is installed, so a
missing frontend fails here with the package to install instead of later
inside ``sol.optimize``.
"""

from __future__ import annotations

try:
    import sol_frontend_onnx  # noqa: F401  (the check is the import)
except ImportError as error:
    raise ImportError("sol.onnx needs the ONNX frontend: pip install sol-frontend-onnx") from error

from sol import *  # noqa: F403  (the public API, re-exported as is)
from sol import __all__, __version__  # noqa: F401
