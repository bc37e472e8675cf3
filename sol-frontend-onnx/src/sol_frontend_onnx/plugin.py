"""The ``sol.frontends`` entry point "onnx"."""

from __future__ import annotations

import sol

from .frontend import OnnxFrontend


@sol.hookimpl
def sol_frontends() -> list[OnnxFrontend]:
    return [OnnxFrontend()]
