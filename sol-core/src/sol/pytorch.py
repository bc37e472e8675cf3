"""``import sol.pytorch as sol``: SOL's API for PyTorch users (needs sol-frontend-torch).

The idiom of SOL's existing users; it is ``sol`` itself plus a check that
the PyTorch frontend is installed, so a missing frontend fails here with
the package to install instead of later inside ``sol.optimize``.
"""

from __future__ import annotations

try:
    import sol_frontend_torch  # noqa: F401  (the check is the import)
except ImportError as error:
    raise ImportError("sol.pytorch needs the PyTorch frontend: pip install sol-frontend-torch") from error

import torch  # noqa: F401  (a PyTorch user's process: backends below register their torch devices)

from sol import *  # noqa: F403  (the public API, re-exported as is)
from sol import __all__, __version__  # noqa: F401
from sol.plugins import registry as _registry

# Loading the plugins imports the backend packages; with torch imported, those that give PyTorch a device of its
# own (sol-backend-ve: torch.ve) register it. A broken plugin is reported by the loader, never raised here.
_registry()
