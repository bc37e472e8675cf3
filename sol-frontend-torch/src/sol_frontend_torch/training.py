"""Training with SOL: compiled forward and backward inside PyTorch's autograd.

A `Variant` is the model captured in one mode (train: batch statistics,
active dropout; eval: running statistics) with the buffers it writes. A
`Step` is a variant differentiated for one set of gradient targets (the
parameters and inputs that require grad): its training forward returns
the model's outputs, the buffer updates and the saved activations; its
backward maps output gradients (and the saved activations) to parameter
and input gradients. `SolFunction` is the torch.autograd.Function that
runs them, so ``loss.backward()`` and torch.optim work unchanged.

A step compiled for a device with its own memory runs either on host
tensors (transparent offloading: inputs, outputs and gradients copied per
call) or, when it is ``native``, on the framework's tensors on that device
(`sol_frontend_torch.device_tensors`): parameters, saved activations, gradients and
buffer updates then stay device tensors, and torch.optim steps them there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sol
import torch
from sol.autodiff import TrainingGraphs, derive
from sol.compiler import compile_graph
from sol.errors import SolInputError
from sol.ir import Graph

from .aten.nn import CUMULATIVE_MOMENTUM
from .capture import capture, torch_dtype
from .convert import RNG_INPUT, convert_training
from .device_tensors import DeviceParams, takes_device_tensors
from .device_tensors import run as run_native
from .fp32_math import following_torch
from .params import ParamSlots

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass
class Variant:
    graph: Graph
    #: buffer names written by the model, one per graph output after the model's own
    state: list[str]
    out_spec: Any
    #: per (parameters, inputs with gradients, native device or None): the compiled step
    steps: dict[tuple[tuple[str, ...], tuple[int, ...], str | None], Step] = field(default_factory=dict)
    #: (params.assignments() when resolved, the slots of the graph's parameters in the model): see SolModule
    param_slots: tuple[int, ParamSlots] | None = field(default=None, repr=False)

    @property
    def model_outputs(self) -> int:
        return len(self.graph.outputs) - len(self.state)

    @property
    def uses_rng(self) -> bool:
        return bool(self.graph.inputs) and self.graph.inputs[-1].name.startswith(RNG_INPUT)


def capture_variant(model: torch.nn.Module, inputs: Sequence[Any], batch_size: int | None, training: bool,
                    device: torch.device | None = None) -> Variant:
    """Capture ``model`` in train or eval mode (every submodule's own mode is restored afterwards).

    ``device``: where the model's tensors are (torch.export runs the model on its parameters' device, so the
    example inputs go there too); the graph itself is the same on every device."""
    modes = {m: m.training for m in model.modules()}
    # momentum=None (a cumulative average) computes its factor from num_batches_tracked in Python, which
    # torch.export cannot trace: such norms are captured with a marker momentum the converter replaces by
    # 1 / num_batches_tracked computed in the graph
    cumulative = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                  and m.momentum is None and m.track_running_stats] if training else []
    model.train(training)
    try:
        for norm in cumulative:
            norm.momentum = CUMULATIVE_MOMENTUM
        captured = capture(model, inputs, batch_size, device)
    finally:
        for module, mode in modes.items():
            module.training = mode
        for norm in cumulative:
            norm.momentum = None
    graph, state = convert_training(captured, model, name=type(model).__name__ + ("_train" if training else "_eval"))
    return Variant(graph, state, captured.program.call_spec.out_spec)


class Step:
    """The compiled training forward and backward of a variant for one set of gradient targets.

    ``native``: called with tensors on ``device`` itself (see the module docstring), not host tensors."""

    def __init__(self, variant: Variant, model: torch.nn.Module, params: Sequence[str], inputs: Sequence[int],
                 device: Any, native: bool = False) -> None:
        graph = variant.graph
        state_outputs = range(variant.model_outputs, len(graph.outputs))
        self.variant = variant
        self.graphs: TrainingGraphs = derive(graph, set(params), set(inputs), non_differentiable=set(state_outputs))
        # the saved activations keep the layout their producer writes (channels-last after a conv)
        self.graphs.free_saved_layouts()
        self.forward = compile_graph(self.graphs.forward, device)
        self.graphs.read_saved_layouts(getattr(self.forward, "metadata", {}).get("output_layouts", {}))
        self.forward_params = ParamSlots(model, self.forward.param_names)
        self.backward = compile_graph(self.graphs.backward, device) if self.graphs.backward.outputs else None
        self.backward_params = ParamSlots(model, self.backward.param_names) if self.backward is not None else None
        #: the parameters given to SolFunction (their gradients are returned in this order)
        self.wrt_params = list(params)
        self.grad_params = list(self.graphs.param_grads)
        self.grad_inputs = list(self.graphs.input_grads)
        self.state_slots = ParamSlots(model, variant.state)
        self.native = native
        if native:
            for compiled in (self.forward, self.backward):
                if compiled is not None and not takes_device_tensors(compiled):
                    raise SolInputError(f"SOL compiled {device} as a host device, so it cannot train on {device} "
                                        "tensors; move the model and the inputs to the CPU")
            self.forward_device = DeviceParams(self.forward_params)
            self.backward_device = DeviceParams(self.backward_params) if self.backward_params is not None else None

    def run_forward(self, inputs: list[torch.Tensor], batch: int) -> list[torch.Tensor]:
        """Every forward output: the model's, the buffer updates (also written into the model's buffers), the saved."""
        compiled = self.forward
        device = inputs[0].device if inputs else torch.device("cpu")
        outputs = [torch.empty(shape, dtype=torch_dtype(spec.dtype), device=device)
                   for shape, spec in zip(compiled.output_shapes(batch), compiled.output_specs, strict=True)]
        if self.native:
            run_native(compiled, self.forward_device, inputs, outputs, batch, device)
        else:
            params = self.forward_params.tensors()
            pointers = self.forward_params.pointers(compiled, params)
            with following_torch():
                compiled.run([x.data_ptr() for x in inputs], pointers, [o.data_ptr() for o in outputs], batch)
        model_outputs = self.variant.model_outputs
        state = outputs[model_outputs:self.graphs.model_outputs]
        with torch.no_grad():
            for buffer, value in zip(self.state_slots.live(), state, strict=True):
                buffer.copy_(value)  # native: device to device
        return outputs

    def run_backward(self, grads: list[torch.Tensor], forward_outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                     batch: int) -> list[torch.Tensor]:
        """Gradients of ``grad_params`` then ``grad_inputs``."""
        assert self.backward is not None and self.backward_params is not None
        compiled = self.backward
        values = list(grads)
        for source in self.graphs.saved:
            values.append(inputs[source.index] if source.source == "input" else forward_outputs[source.index])
        values = [v if v.is_contiguous() else v.contiguous() for v in values]
        device = values[0].device if values else torch.device("cpu")
        outputs = [torch.empty(shape, dtype=torch_dtype(spec.dtype), device=device)
                   for shape, spec in zip(compiled.output_shapes(batch), compiled.output_specs, strict=True)]
        if self.native:
            assert self.backward_device is not None
            run_native(compiled, self.backward_device, values, outputs, batch, device)
        else:
            params = self.backward_params.tensors()
            pointers = self.backward_params.pointers(compiled, params)
            with following_torch():
                compiled.run([v.data_ptr() for v in values], pointers, [o.data_ptr() for o in outputs], batch)
        return outputs


def _gradients(ctx: Any, step: Step, grads: Sequence[torch.Tensor | None], everything: list[torch.Tensor]) -> tuple[Any, ...]:
    """The backward of one step: gradients for (inputs..., the parameters given to the Function...)."""
    if step.backward is None:
        return (None,) * (ctx.input_count + len(step.wrt_params))
    outputs = step.variant.graph.outputs
    device = everything[0].device if everything else torch.device("cpu")  # an output unused by the loss: zeros there
    incoming = []
    for k in step.graphs.differentiable:
        g = grads[k]
        incoming.append(g if g is not None else torch.zeros(outputs[k].concrete_shape(ctx.batch),
                                                             dtype=torch_dtype(outputs[k].dtype), device=device))
    results = step.run_backward(incoming, everything, ctx.inputs, ctx.batch)
    by_param = dict(zip(step.grad_params, results, strict=False))
    by_input = dict(zip(step.grad_inputs, results[len(step.grad_params):], strict=True))
    return (*[by_input.get(i) for i in range(ctx.input_count)], *[by_param.get(name) for name in step.wrt_params])


class SolFunction(torch.autograd.Function):
    """Autograd node of one compiled training step; ``tensors``: the graph inputs, then the parameters with gradients."""

    @staticmethod
    def forward(ctx: Any, step: Step, batch: int, input_count: int, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        inputs = [t.detach() for t in tensors[:input_count]]
        everything = step.run_forward(inputs, batch)
        outputs = everything[:step.variant.model_outputs]
        ctx.step, ctx.batch, ctx.input_count = step, batch, input_count
        ctx.inputs, ctx.everything = inputs, everything
        ctx.mark_non_differentiable(*[o for o in outputs if o.dtype not in _FLOATS])
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> Any:  # type: ignore[override]
        result = _gradients(ctx, ctx.step, grads, ctx.everything)
        del ctx.everything  # activations are freed as soon as the backward ran
        return (None, None, None, *result)


class RecomputeFunction(torch.autograd.Function):
    """Gradients for outputs the inference model computed (eval mode with grad enabled).

    The forward is the fast inference run; only a backward compiles (once)
    the eval-mode step and recomputes the activations it needs.
    """

    @staticmethod
    def forward(ctx: Any, outputs: list[torch.Tensor], make_step: Callable[[], Step], batch: int, input_count: int,  # type: ignore[override]
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.make_step, ctx.batch, ctx.input_count = make_step, batch, input_count
        ctx.inputs = [t.detach() for t in tensors[:input_count]]
        ctx.mark_non_differentiable(*[o for o in outputs if o.dtype not in _FLOATS])
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> Any:  # type: ignore[override]
        step: Step = ctx.make_step()
        everything = step.run_forward(ctx.inputs, ctx.batch)
        return (None, None, None, None, *_gradients(ctx, step, grads, everything))


def rng_key(device_type: str, step: int, device_index: int = 0) -> torch.Tensor:
    """(seed, step) as int64, a host tensor: the seed in force for the device (sol.seed), the module's step
    counter. A native step copies it to its device (16 bytes per forward)."""
    seed = sol.seed(device_type, device_index)
    signed = seed - (1 << 64) if seed >= (1 << 63) else seed
    return torch.tensor([signed, step], dtype=torch.int64)
