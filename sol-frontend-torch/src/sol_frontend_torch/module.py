"""`SolModule`: the torch.nn.Module a user gets back from sol.optimize.

It *is* the original model as far as parameters go: it shares the
original's ``_parameters``, ``_buffers`` and ``_modules`` dicts (no copies),
so ``state_dict`` / ``load_state_dict`` work in both directions and with the
original's names. ``forward`` passes pointers of the framework's own tensors
to the compiled code (`sol.runtime`), re-running a compiled model's
"prepare" program whenever a parameter changed.

Inference (eval mode without gradients) runs the model compiled by
sol.optimize. Training mode, and any call that needs gradients, runs a
training variant (`sol_frontend_torch.training`) compiled lazily on first
use and cached per mode and per set of tensors that require grad.

Tensors on a device with its own memory that PyTorch holds (the VE, CUDA)
run natively (`sol_frontend_torch.device_tensors`): the model, or its training
step, is compiled for that device on first use and called with the
tensors' own addresses; parameters must be on the same device
(``sol_model.to('ve')``), anything else is a SOL error naming the tensor
and both devices.
"""

from __future__ import annotations

from typing import Any

import torch
from sol.runtime.offload import TransferStats
from sol.seeds import generation

from . import autocast, fast_call, native_reader, structured
from .device_runs import NativeRuns
from .fp32_math import following_torch
from .input_binding import InputBinding
from .params import ParamSlots
from .params import _count_assignment as count_assignment
from .training_calls import TrainingCalls
from .variants import Variants


class SolModule(InputBinding, Variants, NativeRuns, TrainingCalls, torch.nn.Module):
    """The user's model, optimized (see the module docstring); each concern of a call is a mixin of its own module:
    `input_binding`, `variants`, `device_runs`, `training_calls`, and `autocast` for torch.autocast."""

    def __init__(self, model: torch.nn.Module, compiled: Any, output_spec: Any = None,
                 example: tuple[tuple[Any, ...], int | None] | None = None, device: Any = None) -> None:
        super().__init__()
        # Share, don't copy: the original's parameters under the original names (see module docstring).
        object.__setattr__(self, "_parameters", model._parameters)
        object.__setattr__(self, "_buffers", model._buffers)
        object.__setattr__(self, "_non_persistent_buffers_set", model._non_persistent_buffers_set)
        object.__setattr__(self, "_modules", model._modules)
        object.__setattr__(self, "_sol_model", model)
        object.__setattr__(self, "_sol_compiled", compiled)
        object.__setattr__(self, "_sol_output_spec", getattr(compiled, "output_structure", None) or output_spec)
        object.__setattr__(self, "_sol_params", ParamSlots(model, list(compiled.param_names)))
        native_reader.ensure()  # the per-call parameter check in C: built here, inside sol.optimize, once per torch version
        #: (example inputs, batch_size) given to sol.optimize: what training variants are captured with
        object.__setattr__(self, "_sol_example", example)
        object.__setattr__(self, "_sol_device", device)
        object.__setattr__(self, "_sol_variants", {})
        object.__setattr__(self, "_sol_rng", [generation(), 0])
        object.__setattr__(self, "_sol_spec_cache", {})  # see _spec_info
        object.__setattr__(self, "_sol_all_params", None)  # see _model_params
        #: whether the model takes or returns a cache (generation): then one compiled model per input shapes
        object.__setattr__(self, "_sol_grows", example is not None and structured.holds_cache(example[0], self._sol_output_spec))
        object.__setattr__(self, "_sol_key", structured.signature_key(example[0]) if self._sol_grows else None)
        object.__setattr__(self, "_sol_shape_variants", {})
        object.__setattr__(self, "_sol_fast", None)  # the C++ call of a plain inference (fast_call.py)
        #: the example as the compiled graph takes it (containers replaced by their tensors): see _tensor_inputs
        object.__setattr__(self, "_sol_flat_example", structured.flatten(example[0]) if example is not None else None)
        self.training = model.training

    @property
    def compiled(self) -> Any:
        return self._sol_compiled

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        fast = self._sol_fast
        if fast is not None:
            if len(inputs) == 1 and not kwargs and not self.training:
                output = fast(inputs[0])  # None unless the call is the plain one it was made for (fast_call.py)
                if output is not None:
                    return output
            # until this call ends well: the parameter check below may update the arrays the struct reads before
            # it re-prepares, and a call that fails between the two must not leave them to the native call
            object.__setattr__(self, "_sol_fast", None)
        example = self._sol_example[0] if self._sol_example is not None else ()
        inputs = structured.positional(self._sol_model, inputs, kwargs, len(example))
        if self._sol_grows:  # a model with a cache: one compiled model per input structure and shapes
            variant = self._shape_variant(inputs)
            if variant is not None:
                return variant(*inputs)
        inputs = self._tensor_inputs(inputs)
        wants_grad = torch.is_grad_enabled() and (
            any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)
            or any(p.requires_grad for p in self._model_params()[1]))
        target = self._native_target(inputs)
        if target is not None:
            if self.training or wants_grad:
                return self._native_train_forward(target, inputs)
            return self._native_forward(self._native_model(target, inputs), inputs)
        cast = autocast.variant(self, inputs, wants_grad)  # inside torch.autocast: its precision (None outside)
        if self.training:
            return self._train_forward(inputs)
        compiled = self._sol_compiled
        if cast is not None:
            compiled, inputs = cast.compiled, cast.inputs(inputs)
        batch = self._batch(inputs, compiled.input_specs)
        tensors = [x if x.is_contiguous() else x.contiguous() for x in inputs]
        param_ptrs = self._sol_params.pointer_array(compiled)  # prepared; reused while no parameter changed
        device = tensors[0].device if tensors else torch.device("cpu")
        outputs = [torch.empty(tuple(shape), dtype=dtype, device=device)
                   for shape, (_, dtype, _) in zip(compiled.output_shapes(batch),
                                                   self._spec_info(compiled.output_specs), strict=True)]
        with following_torch():  # TF32 or not as eager would (transparent offloading to a GPU)
            compiled.run([x.data_ptr() for x in tensors], param_ptrs, [o.data_ptr() for o in outputs], batch)
        if cast is not None:
            outputs = cast.cast_outputs(self._sol_model, inputs, outputs)
        if wants_grad:
            outputs = self._attach_gradients(outputs, inputs, batch)
        else:
            object.__setattr__(self, "_sol_fast", fast_call.refresh(self, compiled, inputs, outputs, cast, batch, fast))
        return self._structure(outputs, self._sol_output_spec)

    def transfers(self) -> TransferStats | None:
        """What crossed between host and device in this module's compiled models so far: the inference model, the
        models compiled for device tensors and the training steps, summed (`sol.runtime.offload.TransferStats`).
        None when none of them runs on a device with its own memory. ``.since(before)`` gives one span's share."""
        models = [self._sol_compiled, *self.__dict__.get("_sol_native", {}).values()]
        for variant in self._sol_variants.values():
            for step in variant.steps.values():
                models += [step.forward, step.backward]
        stats = [m.transfers for m in {id(m): m for m in models if m is not None}.values()
                 if isinstance(getattr(m, "transfers", None), TransferStats)]
        if not stats:
            return None
        total = TransferStats()
        for one in stats:
            for name, value in vars(one).items():
                setattr(total, name, getattr(total, name) + value)
        return total

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        result = super()._apply(fn, recurse)
        # .to(device) puts new Parameter objects into the _parameters dicts directly (no registration hook when the
        # devices' tensor types differ): tensors found before are stale now
        count_assignment(self, "", None)
        return result

    def extra_repr(self) -> str:
        return f"SOL-optimized {type(self._sol_model).__name__}"


__all__ = ["SolModule"]
