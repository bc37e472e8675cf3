"""The ``sol.frontends`` entry point "pytorch"."""

from __future__ import annotations

import sol

from .frontend import TorchFrontend


@sol.hookimpl
def sol_frontends() -> list[TorchFrontend]:
    return [TorchFrontend()]
