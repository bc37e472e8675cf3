"""`SolModule`: the torch.nn.Module a user gets back from sol.optimize.

It *is* the original model as far as parameters go: it shares the
original's ``_parameters``, ``_buffers`` and ``_modules`` dicts (no copies),
so ``state_dict`` / ``load_state_dict`` work in both directions and with the
original's names. ``forward`` passes pointers of the framework's own tensors
to the compiled code (`sol.runtime`), re-running its "prepare" program
whenever a parameter changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from sol.errors import SolError, SolInputError
from sol.ir import BATCH, Size

from .capture import torch_dtype


def _spec_fields(spec: Any) -> tuple[tuple[Size, ...], str]:
    """(shape, numpy dtype name) of a runtime input/output spec (an object, a mapping or a pair)."""
    if isinstance(spec, dict):
        return tuple(spec["shape"]), str(spec["dtype"])
    if isinstance(spec, (tuple, list)):
        return tuple(spec[0]), str(spec[1])
    return tuple(spec.shape), str(spec.dtype)


def _describe(shape: Sequence[Size]) -> str:
    return "[" + ", ".join("batch" if s == BATCH else str(s) for s in shape) + "]"


class _TrainingNotSupported(torch.autograd.Function):
    """Connects outputs to the parameters so that backward() raises instead of giving silently wrong gradients."""

    @staticmethod
    def forward(ctx: Any, count: int, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        return tuple(t.detach() for t in tensors[:count])

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        raise SolError("backward through a SOL-optimized model is not supported yet (training support comes in a later "
                       "release); optimize the model for inference, or run backward on the original PyTorch model")


class SolModule(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, compiled: Any, output_spec: Any = None) -> None:
        super().__init__()
        # Share, don't copy: the original's parameters under the original names (see module docstring).
        object.__setattr__(self, "_parameters", model._parameters)
        object.__setattr__(self, "_buffers", model._buffers)
        object.__setattr__(self, "_non_persistent_buffers_set", model._non_persistent_buffers_set)
        object.__setattr__(self, "_modules", model._modules)
        object.__setattr__(self, "_sol_model", model)
        object.__setattr__(self, "_sol_compiled", compiled)
        object.__setattr__(self, "_sol_output_spec", getattr(compiled, "output_structure", None) or output_spec)
        object.__setattr__(self, "_sol_param_slots", [self._slot(name) for name in compiled.param_names])
        object.__setattr__(self, "_sol_prepared", None)
        self.training = model.training

    def _slot(self, name: str) -> tuple[torch.nn.Module, str]:
        """Where a parameter lives, resolved once; its tensor is fetched per call (the user may reassign it)."""
        owner_path, _, attr = name.rpartition(".")
        owner = self._sol_model.get_submodule(owner_path) if owner_path else self._sol_model
        if not isinstance(getattr(owner, attr, None), torch.Tensor):
            raise SolError(f"the compiled model needs parameter {name!r}, which the PyTorch model does not have")
        return owner, attr

    @property
    def compiled(self) -> Any:
        return self._sol_compiled

    def _params(self) -> list[torch.Tensor]:
        tensors = []
        for owner, attr in self._sol_param_slots:
            tensor = getattr(owner, attr).detach()
            tensors.append(tensor if tensor.is_contiguous() else tensor.contiguous())
        return tensors

    def _prepare_if_changed(self, params: list[torch.Tensor]) -> list[int]:
        pointers = [p.data_ptr() for p in params]
        # _version counts in-place writes (load_state_dict, optimizer steps); data_ptr catches reassignment.
        signature = tuple(zip(pointers, (getattr(owner, attr)._version for owner, attr in self._sol_param_slots), strict=True))
        if signature != self._sol_prepared:
            self._sol_compiled.prepare(pointers)
            object.__setattr__(self, "_sol_prepared", signature)
        return pointers

    def _batch(self, inputs: Sequence[Any]) -> int:
        specs = list(self._sol_compiled.input_specs)
        if len(inputs) != len(specs):
            raise SolInputError(f"the optimized model takes {len(specs)} inputs, got {len(inputs)}")
        batch: int | None = None
        device = getattr(self._sol_compiled, "device_type", "cpu")
        for index, (value, spec) in enumerate(zip(inputs, specs, strict=True)):
            shape, dtype = _spec_fields(spec)
            expected = f"a {dtype} tensor of shape {_describe(shape)}"
            if not isinstance(value, torch.Tensor):
                raise SolInputError(f"input {index}: expected {expected}, got {type(value).__name__}")
            if value.dtype != torch_dtype(dtype):
                raise SolInputError(f"input {index}: expected {expected}, got dtype {str(value.dtype).removeprefix('torch.')}")
            if value.device.type != device:
                raise SolInputError(f"input {index} is on device {value.device}, but the model was optimized for {device}; "
                                    "move the input or optimize for that device")
            if value.dim() != len(shape):
                raise SolInputError(f"input {index}: expected {expected}, got shape {list(value.shape)}")
            for want, got in zip(shape, value.shape, strict=True):
                if isinstance(want, int):
                    ok = want == got
                else:
                    solved = sympy.solve(sympy.Eq(want, got), BATCH)
                    ok = len(solved) == 1 and solved[0].is_integer and solved[0] > 0 and batch in (None, int(solved[0]))
                    batch = int(solved[0]) if ok else batch
                if not ok:
                    raise SolInputError(f"input {index}: expected {expected}, got shape {list(value.shape)}")
        return batch if batch is not None else 1

    def forward(self, *inputs: Any) -> Any:
        compiled = self._sol_compiled
        batch = self._batch(inputs)
        tensors = [x if x.is_contiguous() else x.contiguous() for x in inputs]
        params = self._params()
        param_ptrs = self._prepare_if_changed(params)
        device = tensors[0].device if tensors else torch.device("cpu")
        outputs = [torch.empty(tuple(shape), dtype=torch_dtype(_spec_fields(spec)[1]), device=device)
                   for shape, spec in zip(compiled.output_shapes(batch), compiled.output_specs, strict=True)]
        compiled.run([x.data_ptr() for x in tensors], param_ptrs, [o.data_ptr() for o in outputs], batch)
        if torch.is_grad_enabled():
            needs_grad = [getattr(o, a) for o, a in self._sol_param_slots if getattr(o, a).requires_grad]
            needs_grad += [x for x in inputs if x.requires_grad]
            if needs_grad:
                outputs = list(_TrainingNotSupported.apply(len(outputs), *outputs, *needs_grad))
        if self._sol_output_spec is not None:
            return pytree.tree_unflatten(outputs, self._sol_output_spec)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def extra_repr(self) -> str:
        return f"SOL-optimized {type(self._sol_model).__name__}"


__all__ = ["SolModule"]
