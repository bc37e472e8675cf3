"""A SolModule called inside ``torch.autocast``: computes in autocast's dtype, returns what eager returns there.

Eager PyTorch under ``torch.autocast("cpu", dtype=torch.bfloat16)`` runs
Conv/Linear/MatMul in bf16 and returns bf16 from them, while ops autocast
keeps in fp32 (softmax, normalisations, losses) return fp32. SOL computes the
same way with ``precision="bf16"`` (`sol.precision`): the model's graph is
compiled once more for autocast's precision (cached per precision, like the
training variants), floating inputs are taken in the graph's dtype, and each
output is cast to the dtype eager returns for it there, found once by one
eager call under the same autocast (what autocast returns depends on the
model's last ops, which only running it tells reliably).

A device without that precision raises the `SolUnsupportedError` of
`sol.precision`; gradients under autocast are not supported (bf16 training is
not implemented) and raise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from sol.errors import SolUnsupportedError

#: autocast dtype -> SOL precision
PRECISION_OF = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def active_precision(inputs: Sequence[Any]) -> str | None:
    """The precision autocast asks for on the inputs' device type now; None outside an autocast region."""
    first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
    device_type = first.device.type if first is not None else "cpu"
    try:
        if not torch.is_autocast_enabled(device_type):
            return None
        dtype = torch.get_autocast_dtype(device_type)
    except (RuntimeError, TypeError):  # a device type autocast does not know
        return None
    precision = PRECISION_OF.get(dtype)
    if precision is None:
        raise SolUnsupportedError(f"torch.autocast with dtype {dtype} has no SOL precision; use bfloat16 or float16")
    return precision


class AutocastVariant:
    """The model compiled for one autocast precision, and the dtypes eager returns under that autocast."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.output_dtypes: dict[tuple[torch.dtype, ...], list[torch.dtype]] = {}  # per input dtypes

    def inputs(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """Floating tensors in the dtype the graph takes (autocast lets bf16 activations flow between modules)."""
        out = []
        for x, spec in zip(inputs, self.compiled.input_specs, strict=False):
            want = _torch_dtype(spec.dtype)
            if isinstance(x, torch.Tensor) and x.is_floating_point() and want.is_floating_point and x.dtype != want:
                x = x.to(want)
            out.append(x)
        return (*out, *inputs[len(out):])

    def cast_outputs(self, model: torch.nn.Module, inputs: Sequence[Any], outputs: list[torch.Tensor]) -> list[torch.Tensor]:
        key = tuple(x.dtype for x in inputs if isinstance(x, torch.Tensor))
        dtypes = self.output_dtypes.get(key)
        if dtypes is None:
            with torch.no_grad():
                eager = pytree.tree_leaves(model(*inputs))
            dtypes = [t.dtype for t in eager if isinstance(t, torch.Tensor)]
            if len(dtypes) != len(outputs):  # not a structure we can pair up: keep SOL's dtypes
                dtypes = [o.dtype for o in outputs]
            self.output_dtypes[key] = dtypes
        return [o if o.dtype == d else o.to(d) for o, d in zip(outputs, dtypes, strict=True)]


def _torch_dtype(name: str) -> torch.dtype:
    from .capture import torch_dtype

    return torch_dtype(name)


def variant(module: Any, inputs: Sequence[Any], wants_grad: bool) -> AutocastVariant | None:
    """The `AutocastVariant` of a SolModule for the autocast region the call is in (compiled on first use); None
    outside autocast."""
    precision = active_precision(inputs)
    if precision is None:
        return None
    if wants_grad or module.training:
        raise SolUnsupportedError(f"training under torch.autocast ({precision}) is not supported by SOL yet: run "
                                  "inference (eval mode, torch.no_grad()) under autocast, or train outside it")
    variants = module.__dict__.setdefault("_sol_autocast", {})
    found = variants.get(precision)
    if found is None:
        own = module._sol_compiled
        if getattr(own, "precision", "fp32") == precision:
            compiled = own
        else:
            from sol.compiler import compile_graph

            compiled = compile_graph(own.graph, module._sol_device, passes=False, precision=precision)
        found = variants[precision] = AutocastVariant(compiled)
    return found


__all__ = ["AutocastVariant", "active_precision", "variant"]
