"""Training calls of `SolModule`: train mode, and eval-mode calls with autograd on.

Train mode runs the training variant's step through `SolFunction` (gradients from SOL's compiled backward).
Eval mode with autograd on keeps the inference run's outputs and compiles the eval step only when a backward
asks for it (`RecomputeFunction`). Dropout's masks come from a key per call, restarted by ``sol.set_seed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from sol.seeds import generation

from .params import ParamSlots, assignments
from .training import _FLOATS, RecomputeFunction, SolFunction, Step, rng_key


class TrainingCalls:
    """`SolModule`'s training calls (a mixin: the state lives in SolModule's ``_sol_*`` fields)."""

    def _train_forward(self, inputs: Sequence[Any]) -> Any:
        variant = self._variant(training=True)
        live = self._variant_params(variant)
        wrt_params, wrt_inputs = self._targets(list(variant.graph.params), inputs, live)
        step = self._compiled_step(variant, wrt_params, wrt_inputs)
        user_specs = step.forward.input_specs[: len(step.forward.input_specs) - int(variant.uses_rng)]
        batch = self._batch(inputs, user_specs)
        tensors = [x if x.is_contiguous() else x.contiguous() for x in inputs]
        if variant.uses_rng:
            tensors.append(self._rng_key())
        params = dict(zip(variant.graph.params, live, strict=True))
        outputs = SolFunction.apply(step, batch, len(tensors), *tensors, *[params[n] for n in wrt_params])
        return self._structure(list(outputs), variant.out_spec)

    def _attach_gradients(self, outputs: list[torch.Tensor], inputs: Sequence[Any], batch: int) -> list[torch.Tensor]:
        """Eval mode with autograd on: outputs stay the inference run's; a backward compiles the eval step lazily."""
        names, tensors = self._model_params()
        wrt_params, wrt_inputs = self._targets(names, inputs, tensors)
        live = dict(zip(names, tensors, strict=True))

        def make_step() -> Step:
            variant = self._variant(training=False)
            return self._compiled_step(variant, [n for n in wrt_params if n in variant.graph.params], wrt_inputs)

        tensors = [x if x.is_contiguous() else x.contiguous() for x in inputs]
        return list(RecomputeFunction.apply(outputs, make_step, batch, len(tensors), *tensors, *[live[n] for n in wrt_params]))

    def _targets(self, params: list[str], inputs: Sequence[Any],
                 live: list[torch.Tensor] | None = None) -> tuple[list[str], list[int]]:
        """The parameters (names; ``live``: their tensors, if known) and inputs (indices) that need gradients now."""
        if not torch.is_grad_enabled():
            return [], []
        if live is None:
            live = ParamSlots(self._sol_model, params).live()
        wrt_params = [n for n, t in zip(params, live, strict=True) if t.requires_grad and t.dtype in _FLOATS]
        wrt_inputs = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.requires_grad and x.dtype in _FLOATS]
        return wrt_params, wrt_inputs

    def _model_params(self) -> tuple[list[str], list[torch.Tensor]]:
        """Every parameter of the model, by name: what gradients may be asked for.

        Found without walking the module tree on every call: the two walks of an eval-mode call with autograd on
        cost squeezenet1_1 0.4 ms per call (of 2.2). Found again once any module tensor or submodule was assigned
        anywhere (params.assignments).
        """
        cached = self._sol_all_params
        if cached is not None and cached[0] == assignments():
            return cached[1], cached[2].current()
        names = [name for name, _ in self._sol_model.named_parameters()]
        slots = ParamSlots(self._sol_model, names)
        object.__setattr__(self, "_sol_all_params", (assignments(), names, slots))
        return names, slots.current()

    def _rng_key(self, device_type: str = "x86", device_index: int = 0) -> torch.Tensor:
        state = self._sol_rng
        if state[0] != generation():  # sol.set_seed restarts the sequence of dropout masks
            state[0], state[1] = generation(), 0
        state[1] += 1
        return rng_key(device_type, state[1], device_index)
