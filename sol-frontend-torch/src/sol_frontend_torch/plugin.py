"""The ``sol.frontends`` entry point "pytorch"."""

from __future__ import annotations

import sol
from sol.records import ConfigKey

from .frontend import TorchFrontend
from .settings import FAST_CALL_KEY, READER_KEY


@sol.hookimpl
def sol_frontends() -> list[TorchFrontend]:
    return [TorchFrontend()]


@sol.hookimpl
def sol_config_keys() -> list[ConfigKey]:
    return [READER_KEY, FAST_CALL_KEY]
