"""Entry point ``sol.backends: arm64``: the hook implementations SOL loads."""

from __future__ import annotations

import sol
from sol.records import ConfigKey

from .backend import Arm64Backend
from .config import KEYS
from .deploy import Arm64DeployTarget


@sol.hookimpl
def sol_backends() -> list[Arm64Backend]:
    return [Arm64Backend()]


@sol.hookimpl
def sol_config_keys() -> list[ConfigKey]:
    return list(KEYS)


@sol.hookimpl
def sol_deploy_targets() -> list[Arm64DeployTarget]:
    return [Arm64DeployTarget()]
