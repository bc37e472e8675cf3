"""Every op's gradient rule against central differences of the numpy references (float64, tiny graphs, no builds)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sol.errors import SolUnsupportedError
from sol.ir import Graph, Tensor, all_ops
from sol.ir.ops.dropout_train import keep_mask, scale_factor

from ._autodiff_helpers import check_gradients, make_graph

rng = np.random.default_rng(42)


def r(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape)


def pos(*shape: int) -> np.ndarray:
    return rng.uniform(0.5, 2.0, shape)


def unit(*shape: int) -> np.ndarray:
    return rng.uniform(-0.8, 0.8, shape)


def one(op: str, attrs: dict[str, Any] | None = None) -> Any:
    def build(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
        return g.add_layer(op, [*p, *e], attrs)

    return build


UNARY = {
    "relu": r, "sigmoid": r, "tanh": r, "silu": r, "hardswish": lambda *s: r(*s) * 3, "hardsigmoid": lambda *s: r(*s) * 3,
    "elu": r, "exp": r, "log": pos, "sqrt": pos, "rsqrt": pos, "neg": r, "abs": r, "erf": r, "reciprocal": pos,
    "identity": r, "dropout": r, "contiguous": r, "sin": r, "cos": r, "tan": unit, "sinh": r, "cosh": r, "atan": r,
    "asin": unit, "acos": unit, "asinh": r, "acosh": lambda *s: pos(*s) + 1.0, "atanh": unit,
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op: str) -> None:
    check_gradients(one(op), [UNARY[op](2, 3)])


@pytest.mark.parametrize(("op", "attrs"), [
    ("leaky_relu", {"negative_slope": 0.2}), ("clamp", {"min": -0.5, "max": 0.7}), ("gelu", {"approximate": "none"}),
    ("gelu", {"approximate": "tanh"}), ("softplus", {"beta": 2.0, "threshold": 1.0}),
])
def test_unary_with_attrs(op: str, attrs: dict[str, Any]) -> None:
    check_gradients(one(op, attrs), [r(2, 5)])


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
def test_binary_broadcasting(op: str) -> None:
    a, b = (pos(2, 3, 4), pos(3, 1)) if op in ("pow", "div") else (r(2, 3, 4), r(3, 1))
    check_gradients(one(op), [a, b])


def test_where_and_comparisons_have_no_gradient_into_the_condition() -> None:
    def build(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
        cond = g.add_layer("gt", [p[0], p[1]])
        return g.add_layer("where", [cond[0], p[0], p[1]])

    check_gradients(build, [r(3, 4), r(4)])


@pytest.mark.parametrize("attrs", [
    {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1},
    {"stride": (2, 1), "padding": ((1, 1), (0, 0)), "dilation": (1, 2), "groups": 2},
    {"stride": (2, 2), "padding": ((2, 2), (1, 1)), "dilation": (1, 1), "groups": 4},
])
def test_conv(attrs: dict[str, Any]) -> None:
    check_gradients(one("conv", attrs), [r(2, 4, 5, 6), r(4, 4 // attrs["groups"], 3, 2), r(4)])


def test_conv_transpose() -> None:
    attrs = {"stride": (2,), "padding": (1,), "output_padding": (1,), "dilation": (1,), "groups": 2}
    check_gradients(one("conv_transpose", attrs), [r(2, 4, 5), r(4, 3, 3), r(6)])


def test_linear_matmul_attention() -> None:
    check_gradients(one("linear"), [r(2, 3, 4), r(5, 4), r(5)])
    check_gradients(one("linear"), [r(4), r(5, 4)])
    check_gradients(one("matmul"), [r(2, 3, 4), r(4, 2)])
    check_gradients(one("matmul"), [r(2, 1, 3, 4), r(3, 4, 2)])
    check_gradients(one("attention", {"scale": None, "is_causal": True}), [r(2, 3, 4), r(2, 3, 4), r(2, 3, 5)])
    check_gradients(one("attention", {"scale": 0.3, "is_causal": False}), [r(1, 2, 4), r(1, 3, 4), r(1, 3, 2), r(2, 3)])


@pytest.mark.parametrize(("op", "attrs"), [
    ("max_pool", {"kernel": (3, 2), "stride": (2, 2), "padding": (1, 0), "dilation": (1, 1), "ceil_mode": True}),
    ("avg_pool", {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "ceil_mode": True, "count_include_pad": False,
                  "divisor_override": None}),
    ("avg_pool", {"kernel": (2, 2), "stride": (1, 2), "padding": (1, 0), "ceil_mode": False, "count_include_pad": True,
                  "divisor_override": 3}),
    ("adaptive_avg_pool", {"output_size": (2, 3)}),
    ("adaptive_max_pool", {"output_size": (3, None)}),
])
def test_pooling(op: str, attrs: dict[str, Any]) -> None:
    check_gradients(one(op, attrs), [r(2, 2, 5, 6)])


@pytest.mark.parametrize(("op", "attrs"), [
    ("reduce_sum", {"axes": (0, 2), "keepdims": False}), ("reduce_mean", {"axes": (1,), "keepdims": True}),
    ("reduce_max", {"axes": (2,), "keepdims": False}), ("reduce_min", {"axes": (0, 1), "keepdims": True}),
    ("reduce_prod", {"axes": (1,), "keepdims": False}), ("softmax", {"axis": 1}), ("log_softmax", {"axis": 2}),
    ("cumsum", {"axis": 1, "exclusive": True, "reverse": False}),
])
def test_reductions(op: str, attrs: dict[str, Any]) -> None:
    check_gradients(one(op, attrs), [r(2, 3, 4)])


def test_normalisations() -> None:
    check_gradients(one("batch_norm", {"eps": 1e-3}), [r(3, 2, 2, 2), r(2), pos(2), r(2), r(2)])
    check_gradients(one("layer_norm", {"normalized_ndim": 2, "eps": 1e-5}), [r(2, 3, 4), r(3, 4), r(3, 4)])
    check_gradients(one("group_norm", {"num_groups": 2, "eps": 1e-5}), [r(2, 4, 3), r(4), r(4)])

    def bn_train(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
        return g.add_layer("batch_norm_train", p, {"eps": 1e-5})[:1]

    check_gradients(bn_train, [r(3, 2, 2, 3), r(2), r(2)], tol=1e-5)


@pytest.mark.parametrize(("op", "attrs"), [
    ("reshape", {"shape": (4, 6)}), ("permute", {"perm": (2, 0, 1)}), ("slice", {"axis": 2, "start": 1, "stop": 4, "step": 1}),
    # strided (RoPE's x[..., ::2], x[..., 1::2]): the gradient interleaved with zeros, cut or padded to x's size
    ("slice", {"axis": 2, "start": 0, "stop": 4, "step": 2}), ("slice", {"axis": 2, "start": 1, "stop": 4, "step": 2}),
    ("slice", {"axis": 1, "start": 0, "stop": 3, "step": 2}), ("slice", {"axis": 2, "start": 1, "stop": 3, "step": 3}),
    ("slice", {"axis": 2, "start": 0, "stop": 1, "step": 3}),
    ("pad", {"pads": ((0, 0), (1, 2), (0, 1)), "mode": "constant", "value": 0.5}), ("expand", {"shape": (3, 2, 3, 4)}),
    ("channel_shuffle", {"groups": 3}),
])
def test_movement(op: str, attrs: dict[str, Any]) -> None:
    check_gradients(one(op, attrs), [r(2, 3, 4) if op != "channel_shuffle" else r(2, 6, 2)])


def test_concat_and_split() -> None:
    check_gradients(one("concat", {"axis": 1}), [r(2, 2, 3), r(2, 1, 3), r(2, 3, 3)])

    def split(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
        return g.add_layer("split", p, {"axis": 1, "sizes": (1, 3, 2)})[::2]  # the middle piece gets no gradient

    check_gradients(split, [r(2, 6)])


def test_gathers_scatter_add_into_the_places_read() -> None:
    # repeated indices: their gradients add up; a negative index counts from the end
    index = np.array([[3, 0, 3], [1, -1, 0]])
    check_gradients(one("gather", {"axis": 1}), [r(2, 4, 3)], [index])
    check_gradients(one("gather", {"axis": 0}), [r(4, 3)], [np.array(2)])
    check_gradients(one("gather_elements", {"axis": 1}), [r(3, 4)], [np.array([[3, 3], [0, 1]])])  # smaller index
    check_gradients(one("gather_elements", {"axis": 0}), [r(3, 4)], [np.array([[2, 0, 2, 1], [2, 2, 0, 0]])])

    def embedding(attrs: dict[str, Any]) -> Any:
        def build(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
            return g.add_layer("embedding", [e[0], p[0]], attrs)

        return build

    tokens = np.array([[1, 4, 1], [0, 2, 4]])
    weight = r(5, 3)
    check_gradients(embedding({}), [weight], [tokens])

    def weight_gradient(attrs: dict[str, Any]) -> np.ndarray:
        from sol.autodiff import derive
        from sol.ir.interpret import run_reference

        from ._autodiff_helpers import backward_inputs

        g = make_graph(embedding(attrs), [weight], [tokens])
        tg = derive(g, set(g.params))
        forward = run_reference(tg.forward, [tokens])
        (dw,) = run_reference(tg.backward, backward_inputs(tg, forward, [tokens], [np.ones((2, 3, 3))]))
        return dw

    plain, padded = weight_gradient({}), weight_gradient({"padding_idx": 1})
    assert plain[1].tolist() == [2.0, 2.0, 2.0] and padded[1].tolist() == [0.0, 0.0, 0.0]  # PyTorch's rule
    np.testing.assert_array_equal(np.delete(padded, 1, axis=0), np.delete(plain, 1, axis=0))


def test_losses() -> None:
    target = np.array([2, 0, 1, 2])
    logp = r(4, 3)
    for reduction in ("mean", "sum", "none"):
        check_gradients(one("nll_loss", {"reduction": reduction, "ignore_index": 1}), [logp], [target])

    def weighted(g: Graph, p: list[Tensor], e: list[Tensor]) -> list[Tensor]:
        return g.add_layer("nll_loss", [p[0], e[0], e[1]], {"reduction": "mean", "ignore_index": -100})

    check_gradients(weighted, [logp], [target, pos(3)])  # class weights get no gradient (as in PyTorch)
    check_gradients(one("div_size", {"size": 7}), [r(2, 3)])


def test_dropout_train_gradient_is_the_mask() -> None:
    key = np.array([123, 4])
    attrs = {"p": 0.4, "stream": 2, "per_channel": False}
    check_gradients(one("dropout_train", attrs), [r(3, 5)], [key])
    mask = keep_mask((3, 5), key, attrs)
    assert 0 < mask.sum() < mask.size
    x = r(3, 5)
    from sol.ir.interpret import run_reference

    g = make_graph(one("dropout_train", attrs), [x], [key])
    (y,) = run_reference(g, [key])
    np.testing.assert_allclose(y, np.where(mask, x * scale_factor({"p": 0.4}), 0.0))


def test_every_forward_op_has_a_gradient_rule_or_is_listed() -> None:
    # gradient ops only appear in backward graphs
    without = {name for name, opdef in all_ops().items() if opdef.gradient is None}
    allowed = {"conv_grad_weight", "linear_grad_weight", "max_pool_grad", "avg_pool_grad", "adaptive_avg_pool_grad",
               "adaptive_max_pool_grad", "batch_norm_train_grad", "nll_loss_grad", "rnn_recurrence_grad"}
    assert without <= allowed, sorted(without - allowed)


def test_missing_rule_names_the_layer() -> None:
    from sol.autodiff import derive

    g = Graph("m")
    w = g.add_param("w", r(5, 3))
    idx = g.add_input("idx", [], "int64")
    g.outputs = g.add_layer("embedding", [idx, w], {"scale_grad_by_freq": True}, name="encoder.embed")
    with pytest.raises(SolUnsupportedError, match="encoder.embed"):
        derive(g, {"w"})
