"""Compiled models called on the framework's own device tensors (native offloading: the VE, CUDA).

A model compiled for a device with its own memory (`sol.runtime.offload.OffloadedModel`) takes the
addresses of PyTorch's device tensors as they are: inputs, outputs, parameters, and in training the saved
activations and gradients, never leave the device. `DeviceParams` hands a model's parameters in by
address (``prepare_on_device``), again only after one of them changed; `run` launches one forward on the
queue PyTorch itself uses for the device (`native_queue`: the device's backend says which). Both serve inference
(`SolModule`) and the training steps (`sol_frontend_torch.training.Step`) alike, for any device type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from sol.errors import SolInputError

from .fp32_math import following_torch
from .params import ParamSlots
from .settings import FRONTEND_NAME

#: (registry, {PyTorch device type: (SOL device type, the backend's glue or None)}): read once per plugin registry,
#: since every call on device tensors asks
_DECLARED: list[Any] = [None, {}]


def _declared() -> dict[str, tuple[str, Any]]:
    """What the installed backends declare for PyTorch: ``Backend.framework_devices`` and ``framework_glue``."""
    from sol.plugins import registry

    current = registry()
    if _DECLARED[0] is not current:
        found = {}
        for name, backend in current.backends.items():
            torch_type = backend.framework_devices.get(FRONTEND_NAME)
            if torch_type:
                found[torch_type] = (name, backend.framework_glue(FRONTEND_NAME))
        _DECLARED[:] = [current, found]
    return _DECLARED[1]


def native_device_types() -> dict[str, str]:
    """PyTorch device type -> the SOL device type whose compiled models take its tensors as they are (native
    offloading): what the installed backends declare in ``Backend.framework_devices["pytorch"]``."""
    return {torch_type: name for torch_type, (name, _) in _declared().items()}


def native_queue(compiled: Any, device: torch.device) -> Any:
    """The queue a native call on ``device`` runs on, from the glue of the device's backend
    (`sol.records.Backend.framework_glue`); None where the backend has none (it queues work itself)."""
    glue = _declared().get(device.type, (None, None))[1]
    return glue.native_queue(compiled, device) if glue is not None else None


def takes_device_tensors(compiled: Any) -> bool:
    """Whether ``compiled`` can run on memory someone else owns (a device with its own memory)."""
    return hasattr(compiled, "run_on_device") and hasattr(compiled, "prepare_on_device")


def parameter_device_error(name: str, tensor: torch.Tensor, device: torch.device) -> SolInputError:
    """The error for a parameter that is not where the inputs are (e.g. a model moved to the VE, called with CPU
    tensors): names the parameter, both devices and the two ways out."""
    return SolInputError(f"parameter {name!r} is on {tensor.device}, but the input is on {device}: move the model "
                         f"with .to({str(device)!r}), or the inputs to {tensor.device}")


class DeviceParams:
    """A compiled model's parameters as the framework's device tensors, handed in by address."""

    def __init__(self, slots: ParamSlots) -> None:
        self.slots = slots
        #: (address, version, device) per parameter when prepare_on_device last ran
        self._signature: tuple[tuple[int, int, torch.device], ...] | None = None
        #: the tensors whose addresses the model holds (contiguous copies of non-contiguous ones live here)
        self._held: list[torch.Tensor] = []

    def ensure(self, compiled: Any, device: torch.device, queue: Any) -> None:
        """Re-run ``compiled``'s prepare on the device when a parameter changed (an optimizer step, a buffer update,
        load_state_dict) or moved; check first that every parameter is on ``device``."""
        # live(), not current(): Module.to() between devices replaces parameters without a registration hook
        live = self.slots.live()
        signature = tuple((t.data_ptr(), t._version, t.device) for t in live)
        if signature == self._signature:
            return
        for name, tensor in zip(self.slots.names, live, strict=True):
            if tensor.device != device:
                raise parameter_device_error(name, tensor, device)
        held = [t.detach() if t.is_contiguous() else t.detach().contiguous() for t in live]
        compiled.prepare_on_device([t.data_ptr() for t in held], queue)  # nothing copied: the table of addresses
        self._signature, self._held = signature, held


def run(compiled: Any, params: DeviceParams, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
        batch: int, device: torch.device) -> None:
    """One forward of ``compiled`` on ``device``: contiguous ``inputs`` into preallocated ``outputs``, both tensors
    on ``device``; returns when the device reported the model's status (a SOL error if it failed)."""
    queue = native_queue(compiled, device)  # CUDA: PyTorch's current stream and caching allocator (its backend's glue)
    with following_torch():  # library calls in TF32 or not, as eager's would be with the settings of now
        params.ensure(compiled, device, queue)
        launch = compiled.run_on_device([x.data_ptr() for x in inputs], [o.data_ptr() for o in outputs], batch,
                                        queue)
    compiled.finish(launch)


def check_same_device(tensors: Sequence[Any], device: torch.device, what: str = "input") -> None:
    """Every tensor of ``tensors`` on ``device`` (the first input's), or an error naming the first one that is not."""
    for index, x in enumerate(tensors):
        if isinstance(x, torch.Tensor) and x.device != device:
            raise SolInputError(f"{what} {index} is on {x.device}, but input 0 is on {device}; move it to {device}")


__all__ = ["DeviceParams", "check_same_device", "parameter_device_error", "run", "takes_device_tensors"]
