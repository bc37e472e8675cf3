"""Native device runs of `SolModule`: tensors on a device with its own memory that PyTorch holds (CUDA, the VE, what
installed backends declare in ``Backend.framework_devices``) run where they lie.

The model, or its training step, is compiled for that device on first use and called with the tensors' own
addresses (`sol_frontend_torch.device_tensors`); parameters must be on the same device, anything else is a SOL error
naming the tensor and both devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from sol.errors import SolInputError

from . import device_tensors
from .params import ParamSlots
from .training import SolFunction


class NativeRuns:
    """`SolModule`'s calls on device tensors (a mixin: the state lives in SolModule's ``_sol_*`` fields)."""

    def _native_target(self, inputs: Sequence[Any]) -> str | None:
        """The SOL device (``ve:0``) the inputs live on, when that is a device with its own memory that PyTorch holds
        tensors on (the VE, CUDA): the model runs there natively. None for the host and transparent paths (and for
        device types SOL does not run natively, which the usual input checks name)."""
        first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
        if first is None or first.device.type == getattr(self._sol_compiled, "device_type", "cpu"):
            return None
        native_types = device_tensors.native_device_types()
        sol_type = native_types.get(first.device.type, first.device.type)
        target = f"{sol_type}:{first.device.index or 0}"
        own = getattr(self._sol_compiled, "device", None)
        if first.device.type in native_types or (own is not None and str(own) == target):
            return target
        return None

    def _native_model(self, target: str, inputs: Sequence[Any]) -> Any:
        """The inference model compiled for ``target`` (compiled on first use; the model itself if it was optimized
        for that device)."""
        models = self.__dict__.setdefault("_sol_native", {})
        model = models.get(target)
        if model is None:
            own = getattr(self._sol_compiled, "device", None)
            if own is not None and str(own) == target:
                model = self._sol_compiled  # optimized for this device: the same compiled model, called natively
            else:
                from sol.compiler import compile_graph

                model = compile_graph(self._sol_compiled.graph, target, passes=False,
                                      precision=getattr(self._sol_compiled, "precision", "fp32"))
            if not device_tensors.takes_device_tensors(model):
                device = next(x for x in inputs if isinstance(x, torch.Tensor)).device
                raise SolInputError(f"input 0 is on {device}, but SOL compiled {target} as a host device; "
                                    "move the inputs to the CPU")
            models[target] = model
        return model

    def _native_inputs(self, inputs: Sequence[Any], specs: Sequence[Any]) -> tuple[torch.device, int, list[Any]]:
        """(device, batch, contiguous inputs) of a native call: every input on input 0's device, shapes checked."""
        device = next(x for x in inputs if isinstance(x, torch.Tensor)).device
        device_tensors.check_same_device(inputs, device)
        batch = self._batch(inputs, specs, device.type)
        return device, batch, [x if x.is_contiguous() else x.contiguous() for x in inputs]

    def _native_forward(self, model: Any, inputs: Sequence[Any]) -> Any:
        device, batch, tensors = self._native_inputs(inputs, model.input_specs)
        slots = self.__dict__.setdefault("_sol_native_slots", {})
        params = slots.get(id(model))
        if params is None:
            params = slots[id(model)] = device_tensors.DeviceParams(ParamSlots(self._sol_model, list(model.param_names)))
        outputs = [torch.empty(tuple(shape), dtype=dtype, device=device)
                   for shape, (_, dtype, _) in zip(model.output_shapes(batch),
                                                   self._spec_info(model.output_specs), strict=True)]
        device_tensors.run(model, params, tensors, outputs, batch, device)
        return self._structure(outputs, self._sol_output_spec)

    def _native_train_forward(self, target: str, inputs: Sequence[Any]) -> Any:
        """Training (or an eval-mode call that wants gradients) on device tensors: the variant's step compiled for
        ``target``, run through SolFunction on the tensors where they are; gradients come back as device tensors."""
        device = next(x for x in inputs if isinstance(x, torch.Tensor)).device
        variant = self._variant(training=self.training, device=device)
        live = self._variant_params(variant)
        wrt_params, wrt_inputs = self._targets(list(variant.graph.params), inputs, live)
        step = self._compiled_step(variant, wrt_params, wrt_inputs, target)
        user_specs = step.forward.input_specs[: len(step.forward.input_specs) - int(variant.uses_rng)]
        device, batch, tensors = self._native_inputs(inputs, user_specs)
        if variant.uses_rng:  # the dropout key: 16 bytes to the device per forward
            tensors.append(self._rng_key(device.type, device.index or 0).to(device))
        params = dict(zip(variant.graph.params, live, strict=True))
        outputs = SolFunction.apply(step, batch, len(tensors), *tensors, *[params[n] for n in wrt_params])
        return self._structure(list(outputs), variant.out_spec)
