"""Code generation: planning (clusters, memory), the DFP loop-nest model and its rendering.

``plan`` a Graph, ``generate`` its source through a `Flavour`, ``build`` it.
Backends supply only the flavour (see `sol.codegen.flavour`).
"""

from __future__ import annotations

from typing import Any


def _config() -> Any:
    import sol

    return sol.config


from .flavour import Flavour  # noqa: E402
from .flavours import CpuFlavour  # noqa: E402
from .plan import Plan, plan  # noqa: E402

__all__ = ["CpuFlavour", "Flavour", "Plan", "plan"]
