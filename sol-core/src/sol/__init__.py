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


def optimize(model, *inputs, batch_size: int | None = None, device=None, precision: str | None = None):
    """Optimize ``model`` for the given example inputs (tensors, scalars or `sol.input` specs).

    Returns a framework-native model (e.g. a ``torch.nn.Module``) that holds the
    original parameters and runs SOL's compiled code. ``batch_size`` guides
    heuristics when the batch dimension is a wildcard (``sol.input([0, ...])``).
    ``precision``: ``"fp32"``, ``"bf16"``, ``"fp16"`` or ``"auto"`` (default:
    ``sol.config["compiler::precision"]``, "fp32"); inputs and outputs keep their dtype.
    """
    from .compiler import optimize as _optimize

    return _optimize(model, *inputs, batch_size=batch_size, device=device, precision=precision)


def deploy(model, *inputs, target: str = "lib::shared", lib_name: str = "libsolpredict",
           func_name: str = "sol_predict", path=".", device=None, host_device=None, options=None, dargs=None):
    """Build ``model`` into a standalone C library plus header ``<lib_name>.h`` in ``path``.

    ``inputs``: example tensors or shapes (``[1, 3, 224, 224]``); the library is
    built for exactly these shapes. ``target``: ``"lib::shared"`` or
    ``"lib::static"``. ``device``: the device type to build for (``"x86"``,
    ``"arm64"``, ...: every backend that implements ``sol_deploy_targets``;
    None: this machine's CPU, the first host backend that sees it).
    ``options``: ``{"weights": "file"}`` writes the weights to a separate file
    instead of embedding them; targets add their own (``gcc::march``,
    ``gcc::mtune``; on x86 ``x86::onednn``: ``"avoid"`` for library-free
    code, ``"ship"`` for oneDNN calls with libdnnl copied beside the
    library). ``dargs``: the original SOL's dict form (``lib_name``,
    ``func_name``, ``path``, ``device_type``, ``host_type``). Prints and
    returns a `sol.deployment.DeployResult` (files, exported symbols, link flags,
    run-time libraries).
    """
    # the implementation lives in sol.deployment: a submodule named sol.deploy would shadow this function
    from .deployment import deploy as _deploy

    return _deploy(model, *inputs, target=target, lib_name=lib_name, func_name=func_name, path=path, device=device,
                   host_device=host_device, options=options, dargs=dargs)


def profile(model, *inputs, runs: int = 1, warmup: int = 0):
    """Per-Cluster execution times of an optimized model over ``runs`` calls of ``model(*inputs)``.

    The model must be built with timers: set ``sol.config["compiler::profile"] = True``
    (or ``"compiler::debug"``) before `sol.optimize`. Returns a `sol.debug.profile.Profile`:
    ``print()`` it for a table, ``.to_dict()`` for data, ``.save_chrome_trace(path)`` for Perfetto.
    """
    from .debug.profile import profile as _profile

    return _profile(model, *inputs, runs=runs, warmup=warmup)


def _plugin_config_keys():
    from .plugins import registry

    return registry().config_keys


#: ``sol.config["component::key"]``: typed settings; see `sol.config.Config`.
config = Config(_plugin_config_keys)

__all__ = [
    "__version__",
    "cache",
    "config",
    "deploy",
    "device",
    "devices",
    "hookimpl",
    "input",
    "log",
    "optimize",
    "plugins",
    "profile",
    "seed",
    "seeds",
    "set_seed",
    "versions",
]
