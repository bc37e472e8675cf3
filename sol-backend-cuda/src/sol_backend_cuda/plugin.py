"""Entry point ``sol.backends: cuda``: the hook implementations SOL loads."""

from __future__ import annotations

import sol
from sol.records import ConfigKey

from .artifacts import ARTIFACTS_KEY
from .backend import CudaBackend
from .deploy import CudaDeployTarget
from .toolkit import CC_KEY, DNN_KEY, NVCC_KEY


@sol.hookimpl
def sol_backends() -> list[CudaBackend]:
    return [CudaBackend()]


@sol.hookimpl
def sol_config_keys() -> list[ConfigKey]:
    return [NVCC_KEY, CC_KEY, DNN_KEY, ARTIFACTS_KEY]


@sol.hookimpl
def sol_deploy_targets() -> list[CudaDeployTarget]:
    return [CudaDeployTarget()]
