"""SOL: AI acceleration middleware.

Two lines in a user's program::

    import sol.pytorch as sol            # or: import sol
    sol_model = sol.optimize(model, example_input)

This module is the public API only; the work happens in the submodules.
"""

from __future__ import annotations

from . import cache, log
from ._version import __version__
from .config import Config
from .devices import device, devices
from .hookspecs import hookimpl
from .inputs import input
from .plugins import plugins
from .seeds import seed, seeds, set_seed
from .versions import versions


def optimize(model, *inputs, batch_size: int | None = None, device=None):
    """Optimize ``model`` for the given example inputs (tensors, scalars or `sol.input` specs).

    Returns a framework-native model (e.g. a ``torch.nn.Module``) that holds the
    original parameters and runs SOL's compiled code. ``batch_size`` guides
    heuristics when the batch dimension is a wildcard (``sol.input([0, ...])``).
    """
    from .compiler import optimize as _optimize

    return _optimize(model, *inputs, batch_size=batch_size, device=device)


def _plugin_config_keys():
    from .plugins import registry

    return registry().config_keys


#: ``sol.config["component::key"]``: typed settings; see `sol.config.Config`.
config = Config(_plugin_config_keys)

__all__ = [
    "__version__",
    "cache",
    "config",
    "device",
    "devices",
    "hookimpl",
    "input",
    "log",
    "optimize",
    "plugins",
    "seed",
    "seeds",
    "set_seed",
    "versions",
]
