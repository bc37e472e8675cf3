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
run natively (`sol_frontend_torch.native`): the model, or its training
step, is compiled for that device on first use and called with the
tensors' own addresses; parameters must be on the same device
(``sol_model.to('ve')``), anything else is a SOL error naming the tensor
and both devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from sol.errors import SolInputError
from sol.ir import BATCH, Size, solve_batch
from sol.runtime.offload import TransferStats
from sol.seeds import generation

from . import autocast, fast_call, native, native_reader, structured
from .capture import torch_dtype
from .fp32_math import following_torch
from .params import ParamSlots, assignments
from .params import _count_assignment as count_assignment
from .training import RecomputeFunction, SolFunction, Step, Variant, capture_variant, rng_key

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _spec_fields(spec: Any) -> tuple[tuple[Size, ...], str]:
    """(shape, numpy dtype name) of a runtime input/output spec (an object, a mapping or a pair)."""
    if isinstance(spec, dict):
        return tuple(spec["shape"]), str(spec["dtype"])
    if isinstance(spec, (tuple, list)):
        return tuple(spec[0]), str(spec[1])
    return tuple(spec.shape), str(spec.dtype)


def _describe(shape: Sequence[Size]) -> str:
    return "[" + ", ".join("batch" if s == BATCH else str(s) for s in shape) + "]"


def _expected(shape: Sequence[Size], dtype: torch.dtype) -> str:
    """The "expected ..." part of an input error (built only when there is an error: sympy makes it slow)."""
    return f"a {str(dtype).removeprefix('torch.')} tensor of shape {_describe(shape)}"


def _specialised(value: Any) -> bool:
    """Whether an example input is compiled into the graph instead of being an input of it (None, a Python scalar)."""
    return value is None or isinstance(value, (bool, int, float))


class SolModule(torch.nn.Module):
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

    def _batch(self, inputs: Sequence[Any], specs: Sequence[Any], device: str | None = None) -> int:
        if len(inputs) != len(specs):
            raise SolInputError(f"the optimized model takes {len(specs)} inputs, got {len(inputs)}")
        batch: int | None = None
        device = device or getattr(self._sol_compiled, "device_type", "cpu")
        for index, (value, (shape, dtype, static)) in enumerate(zip(inputs, self._spec_info(specs), strict=True)):
            if not isinstance(value, torch.Tensor):
                raise SolInputError(f"input {index}: expected {_expected(shape, dtype)}, got {type(value).__name__}")
            if value.dtype != dtype:
                raise SolInputError(f"input {index}: expected {_expected(shape, dtype)}, "
                                    f"got dtype {str(value.dtype).removeprefix('torch.')}")
            if value.device.type != device:
                raise SolInputError(self._device_mismatch(index, value, device))
            if static and value.shape == shape:  # the usual case: no batch dim to solve for
                continue
            if value.dim() != len(shape):
                raise SolInputError(f"input {index}: expected {_expected(shape, dtype)}, got shape {list(value.shape)}")
            for want, got in zip(shape, value.shape, strict=True):
                if isinstance(want, int):
                    ok = want == got
                else:
                    solved = solve_batch(want, got)
                    ok = solved is not None and batch in (None, solved)
                    batch = solved if ok else batch
                if not ok:
                    raise SolInputError(f"input {index}: expected {_expected(shape, dtype)}, got shape {list(value.shape)}")
        return batch if batch is not None else 1

    def _device_mismatch(self, index: int, value: torch.Tensor, device: str) -> str:
        runs_on = getattr(self._sol_compiled, "device", None)  # an offloaded model: its SOL device (e.g. ve:0)
        if runs_on is not None:
            return (f"input {index} is on device {value.device}, but the model runs on {runs_on} and takes {device} "
                    f"tensors (copied to {runs_on} per call); move the input to {device}")
        return (f"input {index} is on device {value.device}, but the model was optimized for {device}; "
                "move the input or optimize for that device")

    def _spec_info(self, specs: Sequence[Any]) -> list[tuple[tuple[Size, ...], torch.dtype, bool]]:
        """(shape, torch dtype, whether the shape is all ints) per spec; computed once per list of specs."""
        cache = self._sol_spec_cache
        entry = cache.get(id(specs))
        if entry is None or entry[0] is not specs:  # the entry keeps its list alive, so ids are not reused
            if len(cache) >= 8:  # callers that pass a new list per call (training) are not helped, but bounded
                cache.clear()
            info = []
            for spec in specs:
                shape, dtype = _spec_fields(spec)
                info.append((shape, torch_dtype(dtype), all(isinstance(s, int) for s in shape)))
            entry = cache[id(specs)] = (specs, info)
        return entry[1]

    def _structure(self, outputs: list[torch.Tensor], spec: Any) -> Any:
        if spec is not None:
            return pytree.tree_unflatten(outputs, spec)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _tensor_inputs(self, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """The inputs the compiled model takes: containers (a cache, a tuple) replaced by their tensors, without those
        that were None or Python scalars in sol.optimize's example (torch.export specialised the graph to them),
        which must have the same values now."""
        example = self._sol_flat_example
        inputs = structured.flatten(inputs)
        if example is None or len(inputs) != len(example) or all(not _specialised(e) for e in example):
            return inputs
        kept = []
        for index, (value, seen) in enumerate(zip(inputs, example, strict=True)):
            if not _specialised(seen):
                kept.append(value)
            elif not _specialised(value) or type(value) is not type(seen) or value != seen:
                raise SolInputError(f"input {index}: the model was optimized for {seen!r} here (compiled into the code), "
                                    f"got {type(value).__name__ if isinstance(value, torch.Tensor) else repr(value)}; "
                                    "optimize it again for that value")
        return tuple(kept)

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

    # -- native offloading: the framework's own device tensors ----------------------------------------------------
    def _native_target(self, inputs: Sequence[Any]) -> str | None:
        """The SOL device (``ve:0``) the inputs live on, when that is a device with its own memory that PyTorch holds
        tensors on (the VE, CUDA): the model runs there natively. None for the host and transparent paths (and for
        device types SOL does not run natively, which the usual input checks name)."""
        first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
        if first is None or first.device.type == getattr(self._sol_compiled, "device_type", "cpu"):
            return None
        native_types = native.native_device_types()
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
            if not native.takes_device_tensors(model):
                device = next(x for x in inputs if isinstance(x, torch.Tensor)).device
                raise SolInputError(f"input 0 is on {device}, but SOL compiled {target} as a host device; "
                                    "move the inputs to the CPU")
            models[target] = model
        return model

    def _native_inputs(self, inputs: Sequence[Any], specs: Sequence[Any]) -> tuple[torch.device, int, list[Any]]:
        """(device, batch, contiguous inputs) of a native call: every input on input 0's device, shapes checked."""
        device = next(x for x in inputs if isinstance(x, torch.Tensor)).device
        native.check_same_device(inputs, device)
        batch = self._batch(inputs, specs, device.type)
        return device, batch, [x if x.is_contiguous() else x.contiguous() for x in inputs]

    def _native_forward(self, model: Any, inputs: Sequence[Any]) -> Any:
        device, batch, tensors = self._native_inputs(inputs, model.input_specs)
        slots = self.__dict__.setdefault("_sol_native_slots", {})
        params = slots.get(id(model))
        if params is None:
            params = slots[id(model)] = native.DeviceParams(ParamSlots(self._sol_model, list(model.param_names)))
        outputs = [torch.empty(tuple(shape), dtype=dtype, device=device)
                   for shape, (_, dtype, _) in zip(model.output_shapes(batch),
                                                   self._spec_info(model.output_specs), strict=True)]
        native.run(model, params, tensors, outputs, batch, device)
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

    # -- training ---------------------------------------------------------------
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
                    raise native.parameter_device_error(name, tensor, device)
            variant = capture_variant(self._sol_model, inputs, batch_size, mode, device)
            self._sol_variants[mode] = variant
        return variant

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

    def _rng_key(self, device_type: str = "x86", device_index: int = 0) -> torch.Tensor:
        state = self._sol_rng
        if state[0] != generation():  # sol.set_seed restarts the sequence of dropout masks
            state[0], state[1] = generation(), 0
        state[1] += 1
        return rng_key(device_type, state[1], device_index)

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
