"""`TorchFrontend`: SOL's PyTorch integration (torch.nn.Module -> sol.ir.Graph -> torch.nn.Module).

This module is what the plugin loader imports, so it must stay cheap: torch
and the capture machinery are imported only when a model is actually
handled (importing torch takes seconds, and `import sol` must not).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sol.records import Frontend

from .settings import FRONTEND_NAME

if TYPE_CHECKING:
    import torch
    from sol.ir import Graph

#: the pytree structure of each parsed model's outputs, so `wrap` can rebuild tuples/lists/dicts
_OUTPUT_SPECS: weakref.WeakKeyDictionary[torch.nn.Module, Any] = weakref.WeakKeyDictionary()
#: the example inputs and batch_size each model was parsed with: training variants are captured with them later
_EXAMPLES: weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple[Any, ...], int | None]] = weakref.WeakKeyDictionary()


def output_spec(model: torch.nn.Module) -> Any:
    return _OUTPUT_SPECS.get(model)


class TorchFrontend(Frontend):
    name = FRONTEND_NAME
    description = "PyTorch models (torch.nn.Module), captured with torch.export"
    alias = "pytorch"

    def accepts(self, model: Any) -> bool:
        torch = sys.modules.get("torch")  # a model of torch's exists only once torch is imported
        return torch is not None and isinstance(model, torch.nn.Module)

    def parse(self, model: Any, inputs: tuple[Any, ...], batch_size: int | None = None) -> Graph:
        from .capture import capture
        from .convert import convert

        # The inference graph is always the eval-mode model; training mode gets its own variant on first use.
        modes = {m: m.training for m in model.modules()}
        model.eval()
        try:
            captured = capture(model, inputs, batch_size)
        finally:
            for module, mode in modes.items():
                module.training = mode
        graph = convert(captured, model, name=type(model).__name__)
        _OUTPUT_SPECS[model] = captured.program.call_spec.out_spec
        _EXAMPLES[model] = (tuple(inputs), batch_size)
        return graph

    def fingerprint(self, model: Any, inputs: tuple[Any, ...], batch_size: int | None = None) -> str | None:
        from .fingerprint import fingerprint

        return fingerprint(model, inputs, batch_size)

    def parse_state(self, model: Any) -> Any:
        import torch.utils._pytree as pytree

        spec = _OUTPUT_SPECS.get(model)
        return None if spec is None else pytree.treespec_dumps(spec)

    def restore(self, model: Any, inputs: tuple[Any, ...], batch_size: int | None, state: Any) -> None:
        import torch.utils._pytree as pytree

        if state is not None:
            _OUTPUT_SPECS[model] = pytree.treespec_loads(state)
        _EXAMPLES[model] = (tuple(inputs), batch_size)

    def wrap(self, model: Any, compiled: Any) -> torch.nn.Module:
        from .module import SolModule

        device = getattr(compiled, "metadata", {}).get("flavour")
        return SolModule(model, compiled, output_spec(model), _EXAMPLES.get(model), device)

    def versions(self) -> Mapping[str, str]:
        from importlib.metadata import version

        return {"torch": version("torch")}
