"""Each pass on small hand-built graphs, checked with the numpy reference before and after."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference
from sol.passes import (
    batch_norm_as_scale_shift,
    conv_over_concat,
    elementwise_before_permute,
    eliminate_common_subexpressions,
    fold_batch_norm,
    fold_constants,
    fuse_channel_shuffle,
    gelu_tanh_from_elementwise,
    linear_over_leading_dims,
    merge_relu_maxpool,
    permute_as_reshape,
    pool_before_concat,
    pool_before_pointwise_conv,
    remove_dead_layers,
    remove_identity,
    run_inference_passes,
)

rng = np.random.default_rng(1)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


NCHW = (Purpose.N, Purpose.C, Purpose.P, Purpose.P)


def image_input(g: Graph, channels: int = 3, size: int = 8, batch: object = 2) -> object:
    return g.add_input("x", [Dim(batch, Purpose.N), Dim(channels, Purpose.C), Dim(size, Purpose.P), Dim(size, Purpose.P)])  # type: ignore[arg-type]


def conv_bn_graph(with_bias: bool, batch: object = 2) -> Graph:
    g = Graph("conv_bn")
    x = image_input(g, batch=batch)
    w = g.add_param("conv.weight", rand(4, 3, 3, 3))
    inputs = [x, w] + ([g.add_param("conv.bias", rand(4))] if with_bias else [])
    (y,) = g.add_layer("conv", inputs, {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}, name="conv")
    bn = [g.add_param("bn.running_mean", rand(4)), g.add_param("bn.running_var", np.abs(rand(4)) + 0.5),
          g.add_param("bn.weight", rand(4)), g.add_param("bn.bias", rand(4))]
    (z,) = g.add_layer("batch_norm", [y, *bn], {"eps": 1e-5}, name="bn")
    (r,) = g.add_layer("relu", [z], name="relu")
    g.outputs = [r]
    return g


def assert_same(before: Graph, after: Graph, inputs: list[np.ndarray], params: dict[str, np.ndarray] | None = None) -> None:
    want = run_reference(before, inputs, params)
    got = run_reference(after, inputs, params)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def ops(g: Graph) -> list[str]:
    return [layer.op for layer in g.layers]


def test_remove_identity_and_dead_layers() -> None:
    g = Graph()
    x = g.add_input("x", [Dim(2), Dim(3)])
    (a,) = g.add_layer("dropout", [x], {"p": 0.1})
    (b,) = g.add_layer("relu", [a])
    (c,) = g.add_layer("contiguous", [b])
    g.add_layer("exp", [b])  # dead
    (d,) = g.add_layer("stochastic_depth", [c], {"p": 0.2, "mode": "row"})
    g.outputs = [d]
    before = copy.deepcopy(g)
    remove_dead_layers(remove_identity(g))
    assert ops(g) == ["relu"]
    assert_same(before, g, [rand(2, 3)])


def test_constant_folding_only_folds_consts() -> None:
    g = Graph()
    x = g.add_input("x", [Dim(2), Dim(3)])
    c = g.add_const("c", rand(3))
    p = g.add_param("p", rand(3))
    (c2,) = g.add_layer("exp", [c])
    (p2,) = g.add_layer("exp", [p])  # a param may change later: must stay a layer
    (y,) = g.add_layer("add", [x, c2])
    (z,) = g.add_layer("mul", [y, p2])
    g.outputs = [z]
    before = copy.deepcopy(g)
    fold_constants(g)
    assert ops(g) == ["exp", "add", "mul"]
    assert g.layers[1].inputs[1].kind == "const"
    assert_same(before, g, [rand(2, 3)])


def test_cse() -> None:
    g = Graph()
    x = g.add_input("x", [Dim(2), Dim(3)])
    (a,) = g.add_layer("sigmoid", [x])
    (b,) = g.add_layer("sigmoid", [x])
    (c,) = g.add_layer("softmax", [x], {"axis": 1})
    (d,) = g.add_layer("softmax", [x], {"axis": 0})
    (s,) = g.add_layer("add", [a, b])
    (t,) = g.add_layer("add", [c, d])
    g.outputs = [s, t]
    before = copy.deepcopy(g)
    eliminate_common_subexpressions(g)
    assert ops(g) == ["sigmoid", "softmax", "softmax", "add", "add"]
    assert_same(before, g, [rand(2, 3)])


def test_bn_folding_keeps_parameters_live() -> None:
    for with_bias in (False, True):
        g = conv_bn_graph(with_bias)
        before = copy.deepcopy(g)
        fold_batch_norm(g)
        assert "batch_norm" not in ops(g)
        conv = next(layer for layer in g.layers if layer.op == "conv")
        assert all(t.kind == "intermediate" for t in conv.inputs[1:]), "folded weights are computed from params, not baked"
        x = rand(2, 3, 8, 8)
        assert_same(before, g, [x])
        # New parameter values (as after load_state_dict) flow through the folded graph.
        new = {name: (np.abs(t.data) + 0.1 if "var" in name else t.data * 2).astype(np.float32) for name, t in before.params.items()}
        assert_same(before, g, [x], new)


@pytest.mark.parametrize("first_also_read", [False, True])
def test_bn_folding_of_two_batch_norms_in_a_row(first_also_read: bool) -> None:
    """conv -> bn1 -> bn2: bn2 folds into the conv bn1 was folded into, unless bn1's result has another reader."""
    g = Graph("conv_bn_bn")
    x = image_input(g)
    (y,) = g.add_layer("conv", [x, g.add_param("conv.weight", rand(4, 3, 3, 3))],
                       {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}, name="conv")
    outputs = []
    for name in ("bn1", "bn2"):
        stats = [g.add_param(f"{name}.running_mean", rand(4)), g.add_param(f"{name}.running_var", np.abs(rand(4)) + 0.5),
                 g.add_param(f"{name}.weight", rand(4)), g.add_param(f"{name}.bias", rand(4))]
        (y,) = g.add_layer("batch_norm", [y, *stats], {"eps": 1e-5}, name=name)
        if name == "bn1" and first_also_read:
            outputs += g.add_layer("sigmoid", [y], name="other_reader")
    outputs += g.add_layer("relu", [y], name="relu")
    g.outputs = outputs
    before = copy.deepcopy(g)
    fold_batch_norm(g)
    assert ops(g).count("batch_norm") == (1 if first_also_read else 0)
    assert_same(before, g, [rand(2, 3, 8, 8)])


def test_bn_folding_needs_a_single_consumer() -> None:
    g = conv_bn_graph(True)
    conv_out = g.layers[0].outputs[0]
    g.outputs.append(conv_out)
    fold_batch_norm(g)
    assert "batch_norm" in ops(g)


def test_bn_folding_into_linear() -> None:
    g = Graph()
    x = g.add_input("x", [Dim(5, Purpose.N), Dim(6)])
    (y,) = g.add_layer("linear", [x, g.add_param("fc.weight", rand(4, 6))])
    (z,) = g.add_layer("batch_norm", [y, g.add_param("m", rand(4)), g.add_param("v", np.abs(rand(4)) + 0.5)], {"eps": 1e-3})
    g.outputs = [z]
    before = copy.deepcopy(g)
    fold_batch_norm(g)
    assert "batch_norm" not in ops(g)
    assert_same(before, g, [rand(5, 6)])


def pre_activation_graph(kind: str, affine: bool) -> Graph:
    """concat -> batch_norm -> relu (DenseNet's norm1): no conv/linear to fold the BatchNorm into."""
    g = Graph("pre_activation")
    x = image_input(g, channels=3)
    (c,) = g.add_layer("concat", [x, x], {"axis": 1}, name="cat")
    add = g.add_param if kind == "param" else g.add_const
    stats = [add("bn.running_mean", rand(6)), add("bn.running_var", np.abs(rand(6)) + 0.5)]
    if affine:
        stats += [add("bn.weight", rand(6)), add("bn.bias", rand(6))]
    (z,) = g.add_layer("batch_norm", [c, *stats], {"eps": 1e-5}, name="bn")
    (r,) = g.add_layer("relu", [z], name="relu")
    g.outputs = [r]
    return g


def test_unfolded_batch_norm_becomes_a_multiply_add_of_parameters() -> None:
    for kind, affine in (("param", True), ("const", True), ("param", False)):
        g = pre_activation_graph(kind, affine)
        before = copy.deepcopy(g)
        batch_norm_as_scale_shift(g)
        assert "batch_norm" not in ops(g), (kind, affine)
        mul = next(layer for layer in g.layers if layer.name == "bn.mul")
        assert mul.inputs[1].kind == "intermediate", "the scale is computed from the statistics, not baked"
        x = rand(2, 3, 8, 8)
        assert_same(before, g, [x])
        if kind == "param":  # new statistics (as after load_state_dict) flow through
            new = {name: (np.abs(t.data) + 0.1 if "var" in name else t.data * 2).astype(np.float32)
                   for name, t in before.params.items()}
            assert_same(before, g, [x], new)


def test_batch_norm_of_a_conv_is_folded_not_rewritten() -> None:
    g = conv_bn_graph(True)
    run_inference_passes(g)
    assert "batch_norm" not in ops(g)
    assert not any(layer.name == "bn.mul" for layer in g.layers), "fold_batch_norm runs first and absorbs it"


def test_relu_maxpool_merge() -> None:
    g = Graph()
    x = image_input(g)
    (r,) = g.add_layer("relu", [x])
    (p,) = g.add_layer("max_pool", [r], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": True})
    (e,) = g.add_layer("clamp", [p], {"min": 0.0, "max": 6.0})
    (q,) = g.add_layer("max_pool", [e], {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1), "ceil_mode": False})
    g.outputs = [q]
    before = copy.deepcopy(g)
    merge_relu_maxpool(g)
    assert ops(g) == ["max_pool", "relu", "max_pool", "clamp"]
    assert_same(before, g, [rand(2, 3, 8, 8)])


def test_relu_feeding_two_consumers_is_not_moved() -> None:
    g = Graph()
    x = image_input(g)
    (r,) = g.add_layer("relu", [x])
    (p,) = g.add_layer("max_pool", [r], {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1), "ceil_mode": False})
    g.outputs = [p, r]
    merge_relu_maxpool(g)
    assert ops(g) == ["relu", "max_pool"]


AVG = {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1), "ceil_mode": False,
       "count_include_pad": True, "divisor_override": None}
POINTWISE = {"stride": (1, 1), "padding": ((0, 0), (0, 0)), "dilation": (1, 1), "groups": 1}


def test_avg_pool_moves_before_a_pointwise_conv() -> None:
    g = Graph()
    x = image_input(g, channels=6, batch=BATCH)
    (c,) = g.add_layer("conv", [x, g.add_param("w", rand(4, 6, 1, 1)), g.add_param("b", rand(4))], POINTWISE)
    (p,) = g.add_layer("avg_pool", [c], AVG)
    (r,) = g.add_layer("relu", [p])
    g.outputs = [r]
    before = copy.deepcopy(g)
    pool_before_pointwise_conv(g)
    assert ops(g) == ["avg_pool", "conv", "relu"]
    assert g.layers[1].inputs[0].shape == (BATCH, 6, 4, 4)  # the conv now sees the pooled input
    assert_same(before, g, [rand(3, 6, 8, 8)])


def test_avg_pool_stays_after_convs_it_does_not_commute_with() -> None:
    for conv_attrs, pool_attrs, kernel in [
        (POINTWISE, {**AVG, "padding": (1, 1)}, (1, 1)),        # padded zeros would meet the bias
        (POINTWISE, {**AVG, "divisor_override": 3}, (1, 1)),    # not an average
        (POINTWISE, {**AVG, "ceil_mode": True}, (1, 1)),        # partial windows
        ({**POINTWISE, "padding": ((1, 1), (1, 1))}, AVG, (3, 3)),  # not pointwise
        ({**POINTWISE, "stride": (2, 2)}, AVG, (1, 1)),
    ]:
        g = Graph()
        x = image_input(g, channels=6)
        (c,) = g.add_layer("conv", [x, g.add_param("w", rand(4, 6, *kernel))], conv_attrs)
        (p,) = g.add_layer("avg_pool", [c], pool_attrs)
        g.outputs = [p]
        pool_before_pointwise_conv(g)
        assert ops(g) == ["conv", "avg_pool"], (conv_attrs, pool_attrs)
    g = Graph()  # a second reader of the conv's result keeps the order
    x = image_input(g, channels=6)
    (c,) = g.add_layer("conv", [x, g.add_param("w", rand(4, 6, 1, 1))], POINTWISE)
    (p,) = g.add_layer("avg_pool", [c], AVG)
    g.outputs = [p, c]
    pool_before_pointwise_conv(g)
    assert ops(g) == ["conv", "avg_pool"]


MAX3 = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": True}


def _concat_then_pool(op: str, attrs: dict, axis: int, batch: object = BATCH) -> Graph:
    g = Graph()
    x = image_input(g, channels=4, size=9, batch=batch)
    (a,) = g.add_layer("relu", [x], name="a")
    (b,) = g.add_layer("exp", [x], name="b")
    (c,) = g.add_layer("concat", [a, b, x], {"axis": axis}, name="cat")
    (p,) = g.add_layer(op, [c], attrs, name="pool")
    (y,) = g.add_layer("tanh", [p], name="after")
    g.outputs = [y]
    return g


def test_pool_moves_before_a_channel_concatenation() -> None:
    """Each part is pooled, then the (smaller) pooled parts are joined: padding, ceil_mode and a divisor rule
    included, for max and average pooling, over channels (also given as a negative axis) or the batch."""
    for op, attrs, axis in [("max_pool", MAX3, 1), ("avg_pool", {**AVG, "padding": (1, 1), "ceil_mode": True,
                                                                     "count_include_pad": False}, -3),
                            ("max_pool", MAX3, 0)]:
        g = _concat_then_pool(op, attrs, axis)
        before = copy.deepcopy(g)
        pool_before_concat(g)
        assert ops(g) == ["relu", "exp", op, op, op, "concat", "tanh"], (op, axis)
        assert g.layers[5].outputs[0].shape == before.layers[3].outputs[0].shape  # the pool's old output
        assert_same(before, g, [rand(2, 4, 9, 9)])


def test_pool_stays_after_a_spatial_or_shared_concatenation() -> None:
    g = _concat_then_pool("max_pool", MAX3, 2)  # joined along H: windows would span the seam
    pool_before_concat(g)
    assert ops(g) == ["relu", "exp", "concat", "max_pool", "tanh"]
    g = _concat_then_pool("max_pool", MAX3, 1)
    g.outputs = [*g.outputs, g.layers[2].outputs[0]]  # the joined tensor is read elsewhere too
    pool_before_concat(g)
    assert ops(g) == ["relu", "exp", "concat", "max_pool", "tanh"]


def _concat_then_conv(out_channels: int, conv_attrs: dict, kernel: int = 1, bias: bool = True,
                      batch: object = BATCH) -> Graph:
    """relu(x) (4 ch), exp(x) (4 ch) and x (4 ch) joined over channels, then a convolution, then tanh."""
    g = Graph()
    x = image_input(g, channels=4, size=9, batch=batch)
    (a,) = g.add_layer("relu", [x], name="a")
    (b,) = g.add_layer("exp", [x], name="b")
    (c,) = g.add_layer("concat", [a, b, x], {"axis": 1}, name="cat")
    groups = int(conv_attrs.get("groups", 1))
    inputs = [c, g.add_param("w", rand(out_channels, 12 // groups, kernel, kernel))]
    (y,) = g.add_layer("conv", inputs + ([g.add_param("bias", rand(out_channels))] if bias else []), conv_attrs,
                       name="squeeze")
    (t,) = g.add_layer("tanh", [y], name="after")
    g.outputs = [t]
    return g


@pytest.mark.parametrize(("kernel", "attrs", "bias"), [
    (1, POINTWISE, True),
    (1, POINTWISE, False),
    (3, {**POINTWISE, "stride": (2, 2), "padding": ((1, 1), (1, 1))}, True),  # every part is padded alike
])
def test_conv_over_a_channel_concatenation_becomes_one_conv_per_part(kernel: int, attrs: dict, bias: bool) -> None:
    g = _concat_then_conv(5, attrs, kernel, bias)
    before = copy.deepcopy(g)
    conv_over_concat(g)
    assert "concat" not in ops(g)
    assert ops(g).count("conv") == 3 and ops(g).count("add") == 2 and ops(g).count("slice") == 3
    convs = [layer for layer in g.layers if layer.op == "conv"]
    assert [len(c.inputs) for c in convs] == ([3, 2, 2] if bias else [2, 2, 2])  # the bias goes with the first part
    assert ops(g)[-2:] == ["add", "tanh"] and g.layers[-1].inputs[0] is g.layers[-2].outputs[0]
    assert_same(before, g, [rand(2, 4, 9, 9)])


def test_conv_over_concat_keeps_what_it_cannot_split() -> None:
    g = _concat_then_conv(16, POINTWISE)  # more output channels than joined ones: the sum would cost more
    conv_over_concat(g)
    assert ops(g) == ["relu", "exp", "concat", "conv", "tanh"]
    g = _concat_then_conv(4, {**POINTWISE, "groups": 2})  # grouped: a part's channels span groups
    conv_over_concat(g)
    assert ops(g) == ["relu", "exp", "concat", "conv", "tanh"]
    g = _concat_then_conv(5, POINTWISE)
    g.outputs = [*g.outputs, g.layers[2].outputs[0]]  # the joined tensor is read elsewhere too
    conv_over_concat(g)
    assert ops(g) == ["relu", "exp", "concat", "conv", "tanh"]


def _shuffle_graph(perm: tuple[int, ...], batch: object = BATCH) -> Graph:
    g = Graph()
    x = image_input(g, channels=6, batch=batch)
    (r,) = g.add_layer("relu", [x])
    (a,) = g.add_layer("reshape", [r], {"shape": (batch, 3, 2, 8, 8)})
    (b,) = g.add_layer("permute", [a], {"perm": perm})
    (c,) = g.add_layer("reshape", [b], {"shape": (batch, 6, 8, 8)})
    g.outputs = [c]
    return g


def test_view_transpose_view_becomes_a_channel_shuffle() -> None:
    g = _shuffle_graph((0, 2, 1, 3, 4))
    before = copy.deepcopy(g)
    fuse_channel_shuffle(g)
    assert ops(g) == ["relu", "channel_shuffle"]
    assert g.layers[1].attrs == {"groups": 3}
    assert_same(before, g, [rand(2, 6, 8, 8)])


def test_other_permutations_stay_as_they_are() -> None:
    g = _shuffle_graph((0, 1, 2, 4, 3), batch=2)
    fuse_channel_shuffle(g)
    assert ops(g) == ["relu", "reshape", "permute", "reshape"]


def test_permute_of_size_one_dims_becomes_a_reshape() -> None:
    g = Graph()
    x = g.add_input("x", [Dim(1, Purpose.N), Dim(5, Purpose.S), Dim(4, Purpose.C)])
    (a,) = g.add_layer("permute", [x], {"perm": (1, 0, 2)})  # [1, L, E] -> [L, 1, E]: no byte moves
    (b,) = g.add_layer("permute", [a], {"perm": (2, 1, 0)})  # [L, 1, E] -> [E, 1, L]: a real transpose
    g.outputs = [b]
    before = copy.deepcopy(g)
    permute_as_reshape(g)
    assert ops(g) == ["reshape", "permute"]
    assert g.layers[0].attrs == {"shape": (5, 1, 4)}
    assert_same(before, g, [rand(1, 5, 4)])


def test_permute_moving_a_wildcard_batch_stays() -> None:
    g = Graph()
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(5, Purpose.S), Dim(4, Purpose.C)])
    (a,) = g.add_layer("permute", [x], {"perm": (1, 0, 2)})
    g.outputs = [a]
    permute_as_reshape(g)
    assert ops(g) == ["permute"]


def _linear_permute_scale_residual(batch: object = BATCH) -> Graph:
    """ConvNeXt's block end: Linear on NHWC -> permute to NCHW -> mul(layer scale) -> add(residual) -> relu."""
    g = Graph("block_end")
    x = image_input(g, channels=6, size=4, batch=batch)
    (nhwc,) = g.add_layer("permute", [x], {"perm": (0, 2, 3, 1)}, name="to_nhwc")
    (h,) = g.add_layer("linear", [nhwc, g.add_param("fc.weight", rand(6, 6)), g.add_param("fc.bias", rand(6))],
                       name="fc")
    (y,) = g.add_layer("permute", [h], {"perm": (0, 3, 1, 2)}, name="to_nchw")
    (y,) = g.add_layer("mul", [g.add_param("gamma", rand(6, 1, 1)), y], name="scale")
    (y,) = g.add_layer("add", [y, x], name="residual")
    (y,) = g.add_layer("relu", [y], name="relu")
    g.outputs = [y]
    return g


def test_elementwise_layers_move_before_the_permute_they_read() -> None:
    g = _linear_permute_scale_residual()
    before, output = copy.deepcopy(g), g.outputs[0]
    elementwise_before_permute(g)
    assert [(layer.name, layer.op) for layer in g.layers] == [
        # the operands in the Linear's dim order, made where their values are (inputs and params: first)
        ("residual", "permute"), ("scale", "reshape"), ("scale", "permute"),
        ("to_nhwc", "permute"), ("fc", "linear"), ("scale", "mul"), ("residual", "add"), ("relu", "relu"),
        ("to_nchw", "permute")]
    scale = g.layers[5]
    assert scale.inputs[1] is g.layers[4].outputs[0] and tuple(scale.inputs[0].shape) == (1, 1, 1, 6)
    assert g.outputs == [output] and g.layers[-1].outputs == [output]  # the permute writes what relu wrote
    for batch in (1, 3):
        assert_same(before, g, [rand(batch, 6, 4, 4)])
    # in the pipeline the residual's permute is to_nhwc's twin (CSE) and the layer scale's moves only dims of size 1
    run_inference_passes(g)
    assert ops(g) == ["permute", "reshape", "reshape", "linear", "mul", "add", "relu", "permute"]
    for batch in (1, 3):
        assert_same(before, g, [rand(batch, 6, 4, 4)])


@pytest.mark.parametrize("case", ["permute read twice", "input read twice", "output", "operand read twice"])
def test_elementwise_layers_stay_after_a_permute_they_do_not_own(case: str) -> None:
    g = Graph()
    x = image_input(g, channels=6, size=4)
    (h,) = g.add_layer("relu", [x], name="producer")
    (y,) = g.add_layer("permute", [h], {"perm": (0, 2, 3, 1)})
    (z,) = g.add_layer("mul", [y, y] if case == "operand read twice" else [y, g.add_param("s", rand(6))])
    g.outputs = [z]
    if case == "permute read twice":
        g.outputs.append(g.add_layer("neg", [y])[0])
    elif case == "output":
        g.outputs.append(y)
    elif case == "input read twice":
        g.outputs.append(h)
    layers = list(g.layers)
    elementwise_before_permute(g)
    assert g.layers == layers


def test_pipeline_with_wildcard_batch() -> None:
    g = conv_bn_graph(True, batch=BATCH)
    (flat,) = g.add_layer("reshape", [g.outputs[0]], {"shape": (BATCH, 4 * 8 * 8)})
    (d,) = g.add_layer("dropout", [flat], {"p": 0.5})
    g.outputs = [d]
    before = copy.deepcopy(g)
    run_inference_passes(g)
    assert ops(g)[-3:] == ["conv", "relu", "reshape"]
    for batch in (1, 3):
        assert_same(before, g, [rand(batch, 3, 8, 8)])


def written_out_gelu_tanh(cube: str = "mul", k: float = 0.044715) -> Graph:
    """GPT-2's NewGELUActivation as the frontend emits it: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + k * x^3)))."""
    g = Graph("gelu_tanh")
    x = g.add_input("x", [Dim(4, Purpose.N), Dim(6)])

    def const(value: float) -> object:
        return g.add_const("c", np.array(value, dtype=np.float32))

    (half,) = g.add_layer("mul", [x, const(0.5)])
    if cube == "pow":
        (x3,) = g.add_layer("pow", [x, const(3.0)])
    else:
        (x2,) = g.add_layer("mul", [x, x])
        (x3,) = g.add_layer("mul", [x, x2])  # the other association than transformers' x * x * x
    (kx3,) = g.add_layer("mul", [const(k), x3])
    (inner,) = g.add_layer("add", [kx3, x])
    (scaled,) = g.add_layer("mul", [inner, const(float(np.sqrt(2.0 / np.pi)))])
    (t,) = g.add_layer("tanh", [scaled])
    (one_plus,) = g.add_layer("add", [const(1.0), t])
    (y,) = g.add_layer("mul", [one_plus, half])
    g.outputs = [y]
    return g


@pytest.mark.parametrize("cube", ["mul", "pow"])
def test_written_out_gelu_tanh_becomes_one_gelu(cube: str) -> None:
    g = written_out_gelu_tanh(cube)
    before = copy.deepcopy(g)
    remove_dead_layers(gelu_tanh_from_elementwise(g))
    assert ops(g) == ["gelu"] and g.layers[0].attrs == {"approximate": "tanh"}
    assert g.outputs[0] is g.layers[0].outputs[0]
    assert_same(before, g, [rand(4, 6)])


def test_other_tanh_products_are_not_taken_for_gelu() -> None:
    g = written_out_gelu_tanh(k=0.05)
    gelu_tanh_from_elementwise(g)
    assert "gelu" not in ops(g)


def flattened_linear(restore: tuple[int, ...]) -> Graph:
    """reshape(x, [rows, K]) -> linear -> reshape(restore) -> add: GPT-2's Conv1D and its residual."""
    g = Graph("flattened_linear")
    x = g.add_input("x", [Dim(2, Purpose.N), Dim(3), Dim(6)])
    (flat,) = g.add_layer("reshape", [x], {"shape": (6, 6)})
    (y,) = g.add_layer("linear", [flat, g.add_param("w", rand(4, 6)), g.add_param("b", rand(4))])
    (z,) = g.add_layer("reshape", [y], {"shape": restore})
    (out,) = g.add_layer("add", [z, g.add_param("residual", rand(*restore))])
    g.outputs = [out]
    return g


def test_linear_between_flattening_reshapes_takes_the_leading_dims() -> None:
    g = flattened_linear((2, 3, 4))
    before = copy.deepcopy(g)
    linear_over_leading_dims(g)
    assert ops(g) == ["linear", "add"]
    assert g.layers[0].inputs[0] is g.inputs[0] and g.layers[0].outputs[0].shape == (2, 3, 4)
    assert_same(before, g, [rand(2, 3, 6)])


def test_linear_reshaped_to_other_dims_keeps_its_reshapes() -> None:
    g = flattened_linear((3, 2, 4))
    before = copy.deepcopy(g)
    linear_over_leading_dims(g)
    # the result's reshape only splits the rows: the input is split the same way, and the linear writes [3, 2, 4]
    assert ops(g) == ["reshape", "reshape", "linear", "add"]
    assert g.layers[2].outputs[0].shape == (3, 2, 4) and g.layers[1].outputs[0].shape == (3, 2, 6)
    assert_same(before, g, [rand(2, 3, 6)])


def test_linear_reshaped_across_its_columns_keeps_its_reshapes() -> None:
    g = flattened_linear((3, 8))  # the columns of two rows merged: no linear writes that
    linear_over_leading_dims(g)
    assert ops(g) == ["reshape", "linear", "reshape", "add"]


def test_linear_of_a_permuted_input_writes_the_split_rows() -> None:
    """Multi-head attention: permute -> reshape [rows, E] -> linear -> reshape [L, batch, E] -> add."""
    g = Graph("out_projection")
    x = g.add_input("x", [Dim(2, Purpose.N), Dim(3), Dim(2)])  # [heads, L, E / heads]
    (heads,) = g.add_layer("permute", [x], {"perm": (1, 0, 2)})
    (flat,) = g.add_layer("reshape", [heads], {"shape": (3, 4)})
    (y,) = g.add_layer("linear", [flat, g.add_param("w", rand(5, 4)), g.add_param("b", rand(5))])
    (z,) = g.add_layer("reshape", [y], {"shape": (3, 1, 5)})
    (out,) = g.add_layer("add", [z, g.add_param("residual", rand(3, 1, 5))])
    g.outputs = [out]
    before = copy.deepcopy(g)
    linear_over_leading_dims(g)
    assert ops(g) == ["permute", "reshape", "reshape", "linear", "add"]
    assert g.layers[3].outputs[0] is g.layers[4].inputs[0] and g.layers[3].outputs[0].shape == (3, 1, 5)
    assert_same(before, g, [rand(2, 3, 2)])
