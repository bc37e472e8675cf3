"""Training graphs through the whole pipeline: the compiled forward (with saved activations) and backward equal the references.

One build each for a CNN-like and a sequence-like graph covers every training kernel (batch_norm_train(+grad),
dropout_train, conv_grad_weight, the pooling gradients, nll_loss(+grad), div_size) and the layers the rules emit.
"""

from __future__ import annotations

import numpy as np
import pytest
from sol.autodiff import derive
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference

from ._autodiff_helpers import backward_inputs
from ._codegen_helpers import private_cache  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("private_cache")


def _run(compiled, inputs: list[np.ndarray], params: dict[str, np.ndarray], batch: int) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """Through raw pointers (0-d inputs such as a scalar loss gradient stay 0-d)."""
    arrays = [np.ascontiguousarray(a) if np.ndim(a) else np.asarray(a).copy() for a in inputs]
    plist = [np.ascontiguousarray(params[n]) for n in compiled.param_names]
    outputs = [np.empty(shape, dtype=spec.dtype) for shape, spec in zip(compiled.output_shapes(batch), compiled.output_specs, strict=True)]
    pointers = [p.ctypes.data for p in plist]
    compiled.prepare(pointers)
    compiled.run([a.ctypes.data for a in arrays], pointers, [o.ctypes.data for o in outputs], batch)
    return outputs


def _check(g: Graph, inputs: list[np.ndarray], batch: int, wrt_inputs: set[int], non_differentiable: set[int]) -> None:
    rng = np.random.default_rng(1)
    tg = derive(g, set(g.params), wrt_inputs, non_differentiable)
    params = {n: t.data for n, t in g.params.items()}
    expected = run_reference(tg.forward, inputs)
    got = _run(compile_graph(tg.forward), inputs, params, batch)
    for k, (a, b) in enumerate(zip(expected, got, strict=True)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=f"forward output {k}")
    grads = [rng.standard_normal(np.shape(expected[k])).astype(np.float32) for k in tg.differentiable]
    values = backward_inputs(tg, expected, inputs, grads)
    reference = run_reference(tg.backward, values)
    computed = _run(compile_graph(tg.backward), values, params, batch)
    names = tg.param_grads + [f"input {i}" for i in tg.input_grads]
    for name, a, b in zip(names, reference, computed, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-5, err_msg=f"gradient of {name}")


def test_cnn_training_graph_with_wildcard_batch() -> None:
    rng = np.random.default_rng(0)
    g = Graph("cnn")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(3), Dim(9, Purpose.P), Dim(8, Purpose.P)])
    key = g.add_input("key", [Dim(2)], "int64")
    target = g.add_input("target", [Dim(BATCH, Purpose.N)], "int64")
    w1 = g.add_param("w1", rng.standard_normal((6, 3, 3, 3)).astype(np.float32))
    w2 = g.add_param("w2", rng.standard_normal((6, 2, 3, 3)).astype(np.float32) * 0.3)
    gamma = g.add_param("gamma", rng.uniform(0.5, 1.5, 6).astype(np.float32))
    beta = g.add_param("beta", rng.standard_normal(6).astype(np.float32))
    conv = {"stride": (2, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    (y,) = g.add_layer("conv", [x, w1], conv)
    y, _, _, var = g.add_layer("batch_norm_train", [y, gamma, beta], {"eps": 1e-5})
    (y,) = g.add_layer("relu", [y])
    (y,) = g.add_layer("max_pool", [y], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1),
                                         "ceil_mode": True})
    (y,) = g.add_layer("conv", [y, w2], {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 2), "groups": 3})
    (y,) = g.add_layer("dropout_train", [y, key], {"p": 0.3, "stream": 1, "per_channel": False})
    (y,) = g.add_layer("avg_pool", [y], {"kernel": (2, 2), "stride": (1, 1), "padding": (1, 1), "ceil_mode": False,
                                         "count_include_pad": False, "divisor_override": None})
    (a,) = g.add_layer("adaptive_max_pool", [y], {"output_size": (2, 1)})
    (y,) = g.add_layer("adaptive_avg_pool", [y], {"output_size": (1, 1)})
    (y,) = g.add_layer("add", [y, g.add_layer("reduce_mean", [a], {"axes": (2,), "keepdims": True})[0]])
    (y,) = g.add_layer("reshape", [y], {"shape": (BATCH, 6)})
    (logp,) = g.add_layer("log_softmax", [y], {"axis": 1})
    (loss,) = g.add_layer("nll_loss", [logp, target], {"reduction": "mean", "ignore_index": 5})
    g.outputs = [logp, loss, var]
    batch = 3
    inputs = [rng.standard_normal((batch, 3, 9, 8)).astype(np.float32), np.array([11, 2], dtype=np.int64),
              np.array([0, 5, 2], dtype=np.int64)]
    _check(g, inputs, batch, {0}, {2})


def test_sequence_training_graph() -> None:
    rng = np.random.default_rng(0)
    g = Graph("seq")
    x = g.add_input("x", [Dim(2, Purpose.N), Dim(5, Purpose.S), Dim(8)])
    w = g.add_param("w", (rng.standard_normal((24, 8)) * 0.3).astype(np.float32))
    ln = g.add_param("ln", rng.uniform(0.5, 1.5, 8).astype(np.float32))
    (qkv,) = g.add_layer("linear", [x, w])
    q, k, v = g.add_layer("split", [qkv], {"axis": 2, "sizes": (8, 8, 8)})
    (att,) = g.add_layer("attention", [q, k, v], {"scale": None, "is_causal": True})
    (y,) = g.add_layer("add", [att, x])
    (y,) = g.add_layer("layer_norm", [y, ln], {"normalized_ndim": 1, "eps": 1e-5})
    (y,) = g.add_layer("gelu", [y], {"approximate": "tanh"})
    (y,) = g.add_layer("softmax", [y], {"axis": 2})
    (y,) = g.add_layer("reduce_sum", [g.add_layer("mul", [y, y])[0]], {"axes": (1,), "keepdims": False})
    g.outputs = [y]
    _check(g, [rng.standard_normal((2, 5, 8)).astype(np.float32)], 1, {0}, set())


def test_embedding_and_gather_training_graph() -> None:
    """The scatter-adds of the index gradients: repeated tokens add up, the padding row gets nothing."""
    rng = np.random.default_rng(0)
    g = Graph("emb")
    tokens = g.add_input("tokens", [Dim(2, Purpose.N), Dim(6, Purpose.S)], "int64")
    table = g.add_param("table", rng.standard_normal((7, 4)).astype(np.float32))
    pos = g.add_param("pos", rng.standard_normal((3, 6, 4)).astype(np.float32))
    (y,) = g.add_layer("embedding", [tokens, table], {"padding_idx": 0})
    index = g.add_const("index", np.array([[[2, 0, 2, 1]] * 6] * 2, dtype=np.int64))
    (p,) = g.add_layer("gather_elements", [pos, index], {"axis": 0})
    (row,) = g.add_layer("gather", [pos, g.add_const("rows", np.array([5, 5, 0], dtype=np.int64))], {"axis": 1})
    (y,) = g.add_layer("add", [y, p])
    (y,) = g.add_layer("mul", [y, g.add_layer("reduce_mean", [row], {"axes": (0, 1), "keepdims": False})[0]])
    g.outputs = [y]
    _check(g, [np.array([[1, 0, 3, 3, 6, 0], [2, 3, 3, 1, 0, 5]], dtype=np.int64)], 1, set(), set())
