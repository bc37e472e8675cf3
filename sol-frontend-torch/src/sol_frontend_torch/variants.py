"""The variants of one `SolModule`: other compiled models of the same user model.

Shape variants: a model that takes or returns a cache (generation) is optimized again per input structure and
shapes. Training variants: the model captured in train or eval mode (once; the graph serves every device), and per
variant one compiled step per set of gradient targets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from sol.errors import SolInputError

from . import device_tensors, structured
from .params import ParamSlots, assignments
from .training import Step, Variant, capture_variant

if TYPE_CHECKING:
    from .module import SolModule


class Variants:
    """`SolModule`'s shape and training variants (a mixin: the state lives in SolModule's ``_sol_*`` fields)."""

    def _shape_variant(self, inputs: tuple[Any, ...]) -> SolModule | None:
        """The model optimized for these inputs' structure and shapes (None: the ones it was optimized for)."""
        key = structured.signature_key(inputs)
        if key == self._sol_key:
            return None
        variants = self._sol_shape_variants
        variant = variants.get(key)
        if variant is None:
            from sol.compiler import optimize

            if len(variants) >= 64:  # a long generation: the oldest lengths are not asked for again
                variants.pop(next(iter(variants)))
            variant = variants[key] = optimize(self._sol_model, *inputs, device=getattr(self._sol_compiled, "device", None),
                                               precision=getattr(self._sol_compiled, "precision", "fp32"))
            object.__setattr__(variant, "_sol_shape_variants", variants)  # one table for all of them
        variant.train(self.training)
        return variant

    def _variant(self, training: bool, device: torch.device | None = None) -> Variant:
        """The model captured in train or eval mode (once: the graph serves every device). ``device``: where the
        inputs are; the model's tensors must be there too, or torch.export would fail on the mix."""
        mode = bool(training)
        variant = self._sol_variants.get(mode)
        if variant is None:
            if self._sol_example is None:
                raise SolInputError("this SolModule was built without its example inputs, so it cannot compile a "
                                    "training variant; create it with sol.optimize(model, example_input)")
            inputs, batch_size = self._sol_example
            device = device or torch.device("cpu")
            for name, tensor in (*self._sol_model.named_parameters(), *self._sol_model.named_buffers()):
                if tensor.device != device:
                    raise device_tensors.parameter_device_error(name, tensor, device)
            variant = capture_variant(self._sol_model, inputs, batch_size, mode, device)
            self._sol_variants[mode] = variant
        return variant

    def _variant_params(self, variant: Variant) -> list[torch.Tensor]:
        """The model's tensors of ``variant``'s graph parameters, in its order: their slots are resolved once and again
        only after a module tensor or submodule was assigned anywhere (params.assignments). Resolving them per call
        (two ParamSlots, a get_submodule walk per parameter) cost resnet18's training step 3.1 ms of Python.
        live(), not current(): ``model.to(device)`` on the user's own model swaps the tensors in their modules'
        dicts without a registration hook, and live() reads those dicts at every call."""
        cached = variant.param_slots
        if cached is None or cached[0] != assignments():
            cached = variant.param_slots = (assignments(), ParamSlots(self._sol_model, list(variant.graph.params)))
        return cached[1].live()

    def _compiled_step(self, variant: Variant, wrt_params: list[str], wrt_inputs: list[int],
                       native_target: str | None = None) -> Step:
        """The step for one set of gradient targets (compiled once per set): for host tensors on the device the model
        was optimized for, or with ``native_target`` (``ve:0``) for tensors on that device."""
        key = (tuple(wrt_params), tuple(wrt_inputs), native_target)
        step = variant.steps.get(key)
        if step is None:
            device = native_target if native_target is not None else self._sol_device
            step = Step(variant, self._sol_model, wrt_params, wrt_inputs, device, native=native_target is not None)
            variant.steps[key] = step
        return step
