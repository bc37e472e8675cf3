"""Decompositions a DNN module asks for (sol.codegen.lowering): attention as matmuls, batch norm training as reductions.

A DNN module that `lowers` attention (CUDA: cuBLAS for both products) runs the decomposed layers instead of the
fused loop, so the decomposition must compute the attention op exactly, masks included: a float mask is added to
the scores, a bool mask keeps the scores where it is true, ``is_causal`` keeps the lower triangle.
"""

from __future__ import annotations

import numpy as np
import pytest
from sol.codegen.lowering import attention_as_matmuls
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference


def _graph(mask: str | None, causal: bool, scale: float | None) -> tuple[Graph, list[np.ndarray]]:
    rng = np.random.default_rng(7)
    g = Graph("attention")
    heads, length, source, width = 3, 5, 6 if not causal else 5, 4
    q = g.add_input("q", [Dim(BATCH, Purpose.N), Dim(heads, Purpose.C), Dim(length, Purpose.S), Dim(width, Purpose.C)])
    kv = [Dim(BATCH, Purpose.N), Dim(heads, Purpose.C), Dim(source, Purpose.S), Dim(width, Purpose.C)]
    k, v = g.add_input("k", kv), g.add_input("v", kv)
    inputs = [q, k, v]
    arrays = [rng.standard_normal((2, heads, length, width)), rng.standard_normal((2, heads, source, width)),
              rng.standard_normal((2, heads, source, width))]
    if mask == "float":
        inputs.append(g.add_input("m", [Dim(length, Purpose.S), Dim(source, Purpose.S)]))
        arrays.append(rng.standard_normal((length, source)))
    elif mask == "bool":
        inputs.append(g.add_input("m", [Dim(BATCH, Purpose.N), Dim(1, Purpose.C), Dim(1, Purpose.S),
                                        Dim(source, Purpose.S)], dtype="bool"))
        keep = rng.random((2, 1, 1, source)) > 0.3
        keep[..., 0] = True  # no row fully masked (that is NaN in every implementation)
        arrays.append(keep)
    (y,) = g.add_layer("attention", inputs, {"scale": scale, "is_causal": causal}, name="attn")
    g.outputs = [y]
    return g, [a.astype(np.float32) if a.dtype != bool else a for a in arrays]


@pytest.mark.parametrize("mask,causal,scale", [(None, False, None), ("float", False, 0.3), ("bool", False, None),
                                               (None, True, None), ("bool", True, 0.5)])
@pytest.mark.parametrize("scale_scores", [False, True])
def test_decomposed_attention_computes_the_op(mask: str | None, causal: bool, scale: float | None,
                                              scale_scores: bool) -> None:
    g, arrays = _graph(mask, causal, scale)
    want = run_reference(g, arrays)[0]
    (layer,) = g.layers
    g.layers = attention_as_matmuls(layer, g, scale_scores=scale_scores)
    ops = [lay.op for lay in g.layers]
    assert ops[:2] == (["matmul", "mul"] if scale_scores else ["mul", "matmul"]) and ops[-2:] == ["softmax", "matmul"]
    assert ops.count("where") == (mask == "bool") + causal and ops.count("add") == (mask == "float")
    got = run_reference(g, arrays)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_causal_attention_with_varying_lengths_is_not_decomposed() -> None:
    g = Graph("varying")
    dims = [Dim(1, Purpose.N), Dim(BATCH, Purpose.S), Dim(4, Purpose.C)]
    q, k, v = (g.add_input(n, dims) for n in "qkv")
    (layer_out,) = g.add_layer("attention", [q, k, v], {"scale": None, "is_causal": True}, name="attn")
    with pytest.raises(ValueError, match="causal"):
        attention_as_matmuls(g.layers[0], g)


# -- batch norm training as two-level reductions (a GPU's work items: one per sample and channel) ---------------
from sol.codegen.lowering import batch_norm_train_as_reductions, batch_norm_train_grad_as_reductions  # noqa: E402


@pytest.mark.parametrize("shape,affine", [((3, 4, 5, 6), True), ((3, 4, 5, 6), False), ((5, 4), True),
                                          ((2, 3, 7), True)])
def test_batch_norm_training_as_reductions_computes_the_ops(shape: tuple[int, ...], affine: bool) -> None:
    rng = np.random.default_rng(11)
    g = Graph("bn")
    x = g.add_input("x", [Dim(shape[0], Purpose.N), Dim(shape[1], Purpose.C), *(Dim(s, Purpose.S) for s in shape[2:])])
    dy = g.add_input("dy", [Dim(shape[0], Purpose.N), Dim(shape[1], Purpose.C), *(Dim(s, Purpose.S) for s in shape[2:])])
    extra = []
    if affine:
        extra = [g.add_param("w", rng.uniform(0.5, 1.5, shape[1]).astype(np.float32)),
                 g.add_param("b", rng.standard_normal(shape[1]).astype(np.float32))]
    forward = g.add_layer("batch_norm_train", [x, *extra], {"eps": 1e-5}, name="bn")
    backward = g.add_layer("batch_norm_train_grad", [dy, x, forward[1], forward[2], *extra[:1]], {}, name="bn.grad")
    g.outputs = [*forward, *backward]
    arrays = [(rng.standard_normal(shape) * 2 + 1).astype(np.float32), rng.standard_normal(shape).astype(np.float32)]
    want = run_reference(g, arrays)
    first, second = g.layers
    g.layers = batch_norm_train_as_reductions(first, g) + batch_norm_train_grad_as_reductions(second, g)
    assert "batch_norm_train" not in {lay.op for lay in g.layers}
    assert [lay.op for lay in g.layers].count("reduce_mean") == (2 if len(shape) > 2 else 1) * 4
    got = run_reference(g, arrays)
    for name, a, b in zip(("y", "mean", "invstd", "unbiased", "dx", "dweight", "dbias"), got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=name)


def test_batch_norm_with_a_varying_batch_keeps_the_fused_kernel() -> None:
    g = Graph("bn_wild")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(4, Purpose.C), Dim(5, Purpose.S)])
    g.add_layer("batch_norm_train", [x], {"eps": 1e-5}, name="bn")
    with pytest.raises(ValueError, match="batch size varies"):
        batch_norm_train_as_reductions(g.layers[0], g)


def _reduction(shape: tuple[int, ...], op: str, axes: tuple[int, ...], keepdims: bool) -> Graph:
    g = Graph("columns")
    dims = [Dim(s, Purpose.N if d == 0 else Purpose.C) for d, s in enumerate(shape)]
    (y,) = g.add_layer(op, [g.add_input("x", dims)], {"axes": axes, "keepdims": keepdims}, name="r")
    g.outputs = [y]
    return g


@pytest.mark.parametrize("shape,axes,groups", [
    ((16, 128, 768), (0, 1), 64),   # a transformer's bias gradient: 2048 rows
    ((600, 70), (0,), 8),           # 600 rows: 64, 32 and 16 do not divide them
    ((4, 256, 5, 3), (0, -3), 64),  # negative axes, two kept dims
    ((400, 70), (0,), None),        # under SPLIT_ROWS
    ((16, 128, 768), (0, 2), None),  # not the leading dims
    ((16, 128), (0, 1), None),      # nothing kept: a whole-tensor sum stays one reduction
    ((521, 3), (0,), None),         # a prime number of rows: no group count divides them
])
def test_column_reduction_groups(shape, axes, groups) -> None:
    from sol.codegen.lowering import column_reduction_groups

    (layer,) = _reduction(shape, "reduce_sum", axes, False).layers
    assert column_reduction_groups(layer) == groups


def test_column_reduction_with_a_varying_batch_is_not_split() -> None:
    from sol.codegen.lowering import column_reduction_groups

    g = Graph("varying")
    (y,) = g.add_layer("reduce_sum", [g.add_input("x", [Dim(BATCH, Purpose.N), Dim(1024, Purpose.C), Dim(8, Purpose.C)])],
                       {"axes": (0, 1), "keepdims": False}, name="r")
    assert column_reduction_groups(g.layers[0]) is None


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_column_reduction_in_stages_computes_the_op(op: str, keepdims: bool) -> None:
    from sol.codegen.lowering import column_reduction_in_stages

    g = _reduction((12, 80, 33), op, (0, 1), keepdims)
    x = np.random.default_rng(3).standard_normal((12, 80, 33)).astype(np.float32) * 3 + 1
    want = run_reference(g, [x])[0]
    (layer,) = g.layers
    g.layers = column_reduction_in_stages(layer, g)
    assert [lay.op for lay in g.layers] == ["reshape", op, op] + (["reshape"] if keepdims else [])
    assert g.layers[0].outputs[0].shape == (64, 15, 33) and g.layers[-1].outputs[0] is layer.outputs[0]
    got = run_reference(g, [x])[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
