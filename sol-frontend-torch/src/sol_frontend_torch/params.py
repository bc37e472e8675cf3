"""Where a compiled graph's parameters live in the PyTorch model, and when they changed.

Parameters stay the framework's tensors: a slot is resolved once per name
and its tensor fetched per call (the user may reassign it). A compiled
model's "prepare" program (derived parameters such as folded BatchNorm
weights) re-runs only when a parameter changed: ``_version`` counts in-place
writes (optimizer steps, load_state_dict) and data_ptr catches reassignment.
"""

from __future__ import annotations

from typing import Any

import torch
from sol.errors import SolError


class ParamSlots:
    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        self.names = list(names)
        self._slots = [self._slot(model, name) for name in names]
        self._prepared: dict[int, tuple[tuple[int, int], ...]] = {}

    @staticmethod
    def _slot(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
        owner_path, _, attr = name.rpartition(".")
        owner = model.get_submodule(owner_path) if owner_path else model
        if not isinstance(getattr(owner, attr, None), torch.Tensor):
            raise SolError(f"the compiled model needs parameter {name!r}, which the PyTorch model does not have")
        return owner, attr

    def live(self) -> list[torch.Tensor]:
        """The framework's tensors themselves (with autograd identity: what gradients attach to)."""
        return [getattr(owner, attr) for owner, attr in self._slots]

    def tensors(self) -> list[torch.Tensor]:
        """Detached, contiguous views (copies only where the framework's tensor is not contiguous)."""
        out = []
        for tensor in self.live():
            tensor = tensor.detach()
            out.append(tensor if tensor.is_contiguous() else tensor.contiguous())
        return out

    def pointers(self, compiled: Any, tensors: list[torch.Tensor]) -> list[int]:
        """Pointers for ``compiled``, running its prepare program first when a parameter changed since its last one."""
        pointers = [t.data_ptr() for t in tensors]
        signature = tuple(zip(pointers, (t._version for t in self.live()), strict=True))
        if self._prepared.get(id(compiled)) != signature:
            compiled.prepare(pointers)
            self._prepared[id(compiled)] = signature
        return pointers
