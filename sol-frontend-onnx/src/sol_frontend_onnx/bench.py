"""Loading .onnx files for the side-by-side benchmarks (SOL vs onnxruntime vs OpenVINO on the same file).

    from sol_frontend_onnx import bench
    feeds = bench.example_inputs("resnet50.onnx", batch_size=8)
    model = bench.load("resnet50.onnx", feeds)       # compiled once (cached on disk)
    outputs = model.run(None, feeds)                 # onnxruntime's calling convention

``load`` goes through ``sol.optimize`` exactly like a user's program, so
the benchmark measures what users get (passes, cache, device selection).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import sol

from .loading import load_model, user_inputs
from .model import OnnxModel


def example_inputs(path: str | os.PathLike[str] | onnx.ModelProto, batch_size: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs by name for the model's declared shapes; symbolic dims become ``batch_size``."""
    model = load_model(path)
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    names = set(user_inputs(model))
    for vi in model.graph.input:
        if vi.name not in names:
            continue
        ttype = vi.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else batch_size for d in ttype.shape.dim)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[vi.name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


def load(path: str | os.PathLike[str] | onnx.ModelProto, inputs: Mapping[str, Any] | None = None, *,
         batch_size: int | None = None, device: Any = None) -> OnnxModel:
    """``sol.optimize`` of an .onnx file; ``inputs`` (by name) fix example values/shapes, else the declared shapes."""
    model = load_model(path)
    examples = (dict(inputs),) if inputs else ()
    return sol.optimize(model, *examples, batch_size=batch_size, device=device)
