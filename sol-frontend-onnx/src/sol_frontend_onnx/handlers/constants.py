"""Operators whose outputs depend only on scalar inputs known at import (window functions, mel filter banks).

They are evaluated once, when the model is optimized, with ONNX's own
reference implementation (so SOL follows the specification exactly), and
become constants of the graph, as Shape -> Gather arithmetic does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from sol.ir import Tensor

from ._registry import handler


@handler("HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix")
def constant_by_reference(ctx: Any) -> Tensor:
    node = ctx.node
    values = [np.asarray(ctx.static(ctx.need(i), f"input {i}")) for i in range(len(node.input))]
    names = [f"in{i}" for i in range(len(values))]
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for n, v in zip(names, values, strict=True)]
    call = helper.make_node(node.op_type, names, ["out"], domain=node.domain)
    call.attribute.extend(node.attribute)
    graph = helper.make_graph([call], "constant", inputs, [helper.make_value_info("out", onnx.TypeProto())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ctx.opset)])
    (result,) = ReferenceEvaluator(model).run(None, dict(zip(names, values, strict=True)))
    return ctx.const(numpy_helper.to_array(numpy_helper.from_array(np.asarray(result))), name="value")
