"""Entry point ``sol.backends: ve``: the hook implementations SOL loads."""

from __future__ import annotations

import sol
from sol.plugins import after_load
from sol.records import ConfigKey

from .backend import VeBackend
from .deploy import VeDeployTarget
from .toolchain import CXX_KEY
from .torch_ve import FALLBACK_KEY, start_if_torch_imported
from .vednn import DNN_KEY, VEDNN_KEY

# SOL's plugins load in a PyTorch process (import sol.pytorch): PyTorch's VE device starts once they are loaded (it
# needs sol.config and the cache, which cannot be used while the registry loads this module)
after_load(start_if_torch_imported)


@sol.hookimpl
def sol_backends() -> list[VeBackend]:
    return [VeBackend()]


@sol.hookimpl
def sol_config_keys() -> list[ConfigKey]:
    return [CXX_KEY, DNN_KEY, VEDNN_KEY, FALLBACK_KEY]


@sol.hookimpl
def sol_deploy_targets() -> list[VeDeployTarget]:
    return [VeDeployTarget()]
