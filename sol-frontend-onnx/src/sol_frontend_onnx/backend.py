"""ONNX's backend interface (`onnx.backend.base.Backend`) on SOL, so ONNX's backend test suite runs against SOL.

``prepare(model, device)`` returns a `SolBackendRep`; the first ``run(inputs)``
imports and compiles the model for those inputs' shapes (and for the values
of inputs that decide shapes, e.g. a Reshape's target), later runs with the
same signature reuse the compiled model. Models never change shape with a
wildcard batch here: the suite's reference data has fixed shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType
from sol.compiler import compile_graph

from .loading import import_model, user_inputs
from .model import OnnxModel


def sol_device(device: str) -> str | None:
    """ONNX's device string ("CPU", "CUDA:1") as a SOL device (None: the host CPU)."""
    parsed = Device(device)
    if parsed.type == DeviceType.CPU:
        return None
    return f"cuda:{parsed.device_id}"


class SolBackendRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, device: str = "CPU") -> None:
        self.model = model
        self.device = sol_device(device)
        self.input_names = user_inputs(model)
        self._compiled: list[OnnxModel] = []

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        feed = self._feed(inputs)
        model = next((m for m in self._compiled if _fits(m, feed)), None)
        if model is None:
            imported = import_model(self.model, [feed], wildcard=False)
            model = OnnxModel(compile_graph(imported.graph, self.device), imported)
            self._compiled.append(model)
        return tuple(model.run(None, feed))

    def _feed(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, Mapping):
            return {name: np.asarray(value) for name, value in inputs.items()}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        return {name: np.asarray(value) for name, value in zip(self.input_names, inputs, strict=False)}


def _fits(model: OnnxModel, feed: Mapping[str, np.ndarray]) -> bool:
    for name, value in model.specialized.items():
        if not np.array_equal(feed[name], value):
            return False
    fed = [feed[name] for name in model._feeds]
    return all(a.shape == spec.concrete(1) and str(a.dtype) == spec.dtype
               for a, spec in zip(fed, model.compiled.input_specs, strict=True))


class SolBackend(Backend):
    """SOL as an ONNX backend: ``SolBackend.prepare(model, "CPU").run(inputs)``."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> SolBackendRep:
        super().prepare(model, device, **kwargs)  # the ONNX checker
        return SolBackendRep(model, device)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        # SOL's ONNX backend runs on the host; other SOL devices are reached through sol.optimize(device=...)
        return Device(device).type == DeviceType.CPU


prepare = SolBackend.prepare
run_model = SolBackend.run_model
supports_device = SolBackend.supports_device
is_compatible = SolBackend.is_compatible

__all__: Sequence[str] = ["SolBackend", "SolBackendRep", "is_compatible", "prepare", "run_model", "supports_device"]
