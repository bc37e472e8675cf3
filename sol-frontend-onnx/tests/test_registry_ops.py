"""ONNX ops onto the registry's scatter / N-d gather / selection ops, and Gradient through SOL's autodiff."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import sol
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from sol_frontend_onnx import backend

RNG = np.random.default_rng(5)


def _value(name: str, dtype: int, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def test_scatter_gather_topk_match_onnx_reference() -> None:
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    nodes = [
        helper.make_node("ScatterElements", ["x", "idx", "upd"], ["s"], axis=1, reduction="add"),
        helper.make_node("ScatterND", ["s", "rows", "row_upd"], ["t"]),
        helper.make_node("GatherND", ["t", "pick"], ["g"]),
        helper.make_node("TopK", ["t", "k"], ["values", "indices"], axis=1, largest=0),
        helper.make_node("MaxPool", ["img"], ["pooled", "where"], kernel_shape=[2, 2], strides=[2, 1], pads=[1, 0, 0, 1]),
    ]
    graph = helper.make_graph(nodes, "ops", [
        _value("x", f, [3, 6]), _value("idx", i64, [3, 2]), _value("upd", f, [3, 2]), _value("rows", i64, [2, 1]),
        _value("row_upd", f, [2, 6]), _value("pick", i64, [4, 2]), _value("k", i64, [1]), _value("img", f, [1, 2, 5, 4]),
    ], [_value("t", f, [3, 6]), _value("g", f, [4]), _value("values", f, [3, 4]), _value("pooled", f, [1, 2, 3, 4]),
        _value("indices", i64, [3, 4]), _value("where", i64, [1, 2, 3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {
        "x": RNG.standard_normal((3, 6)).astype(np.float32),
        "idx": np.array([[0, 0], [5, -1], [2, 3]], dtype=np.int64),  # repeated indices add up
        "upd": RNG.standard_normal((3, 2)).astype(np.float32),
        "rows": np.array([[2], [-3]], dtype=np.int64),
        "row_upd": RNG.standard_normal((2, 6)).astype(np.float32),
        "pick": np.array([[0, 1], [2, 5], [1, -1], [0, 0]], dtype=np.int64),
        "k": np.array([4], dtype=np.int64),
        "img": np.round(RNG.standard_normal((1, 2, 5, 4)), 1).astype(np.float32),
    }
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = backend.prepare(model).run(feeds)
    for e, g, name in zip(expected, got, ["t", "g", "values", "pooled", "indices", "where"], strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6, err_msg=name)


def test_gradient_of_a_non_scalar_output() -> None:
    """Gradient(xs=[x, w], y) of y = relu(x @ w): dy is all ones (ONNX's rule)."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
        helper.make_node("Gradient", ["x", "w"], ["dx", "dw"], domain="ai.onnx.preview.training", xs=["x", "w"], y="y"),
    ]
    graph = helper.make_graph(nodes, "grad", [_value("x", f, [2, 3]), _value("w", f, [3, 4])],
                              [_value("y", f, [2, 4]), _value("dx", f, [2, 3]), _value("dw", f, [3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.preview.training", 1)])
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    y, dx, dw = backend.prepare(model).run([x, w])
    mask = (x @ w > 0).astype(np.float32)
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-5)
    np.testing.assert_allclose(dx, mask @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, x.T @ mask, rtol=1e-5, atol=1e-6)


def _lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """The ONNX spec's LRN in float64 (onnx.reference's loops over the batch instead of the channels, and is 4-D only)."""
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = x.astype(np.float64) ** 2
    total = np.zeros_like(squares)
    for c in range(x.shape[1]):
        total[:, c] = squares[:, max(0, c - before):c + after + 1].sum(axis=1)
    return (x / (bias + alpha / size * total) ** beta).astype(np.float32)


@pytest.mark.parametrize(("size", "shape"), [(5, [1, 8, 6, 7]), (4, [2, 3, 5]), (1, [1, 4, 3, 3]), (3, [1, 2, 2, 2, 3])])
def test_lrn_matches_the_onnx_spec(size: int, shape: list[int]) -> None:
    """The channel window as shifted slices: odd and even sizes, windows wider than the channels, 1-3 spatial dims."""
    f = TensorProto.FLOAT
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.02, beta=0.75, bias=2.0)
    graph = helper.make_graph([node], "lrn", [_value("x", f, shape)], [_value("y", f, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = (3 * RNG.standard_normal(shape)).astype(np.float32)
    got = backend.prepare(model).run({"x": x})[0]
    np.testing.assert_allclose(got, _lrn(x, size, alpha=0.02, beta=0.75, bias=2.0), rtol=1e-5, atol=1e-6)


def _max_pool(x: np.ndarray, kernel: int, stride: int, pads: list[int], ceil_mode: bool) -> np.ndarray:
    """ONNX MaxPool over 2 square dims by its definition (onnx.reference miscounts asymmetric pads): pad with
    -inf, slide the window; with ceil_mode a last partial window counts if it starts inside the padded input."""
    padded = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])], constant_values=-np.inf)
    counts = []
    for size in padded.shape[2:]:
        span = size - kernel
        count = (-(-span // stride) if ceil_mode else span // stride) + 1
        counts.append(count - 1 if ceil_mode and (count - 1) * stride >= size else count)
    out = np.empty((*x.shape[:2], *counts), dtype=x.dtype)
    for i in range(counts[0]):
        for j in range(counts[1]):
            window = padded[:, :, i * stride:i * stride + kernel, j * stride:j * stride + kernel]
            out[:, :, i, j] = window.max(axis=(2, 3))
    return out


@pytest.mark.parametrize(("size", "kernel", "stride", "pads", "ceil_mode", "explicit_pad"), [
    (111, 3, 2, [0, 0, 1, 1], 0, False),  # Caffe's ceil-mode sizes (Inception-v2): the ceil_mode windows
    (112, 3, 2, [0, 0, 1, 1], 0, False),
    (9, 3, 1, [1, 1, 2, 2], 0, True),     # one more window than ceil_mode would give: padded explicitly
    (10, 3, 2, [0, 0, 1, 1], 1, False),   # asymmetric and ceil_mode together
    (11, 3, 2, [1, 1, 0, 0], 0, True),    # more padding at the start
])
def test_asymmetric_max_pool_padding_matches_onnx_reference(size: int, kernel: int, stride: int, pads: list[int],
                                                            ceil_mode: int, explicit_pad: bool) -> None:
    f = TensorProto.FLOAT
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[kernel, kernel], strides=[stride, stride], pads=pads,
                            ceil_mode=ceil_mode)
    graph = helper.make_graph([node], "pool", [_value("x", f, [1, 4, size, size])], [_value("y", f, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    x = RNG.standard_normal((1, 4, size, size)).astype(np.float32)
    compiled = sol.optimize(model, x)
    np.testing.assert_array_equal(compiled(x), _max_pool(x, kernel, stride, pads, bool(ceil_mode)))
    assert any(layer.op == "pad" for layer in compiled.compiled.graph.layers) == explicit_pad
