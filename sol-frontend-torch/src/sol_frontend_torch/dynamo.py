"""``torch.compile(model, backend="sol")``: the ``torch_dynamo_backends`` entry point."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def sol_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable[..., Any]:
    """Optimize the FX graph Dynamo captured with ``sol.optimize`` and return the optimized callable."""
    import sol

    optimized = sol.optimize(gm, *example_inputs)

    def run(*args: Any) -> Any:
        result = optimized(*args)
        # Dynamo expects a tuple/list of outputs from a compiled graph.
        return result if isinstance(result, (tuple, list)) else (result,)

    return run
