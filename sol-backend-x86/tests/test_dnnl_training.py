"""oneDNN's training primitives and the training kernels around them, against the numpy reference.

``conv_grad_weight`` runs as convolution backward-weights, a conv's input
gradient (the ``conv_transpose`` its gradient rule emits, marked
``conv_input_grad``) as convolution backward-data; both over channels-last
activations, with groups, strides, dilations and uneven padding. A linear
layer's gradients run as inner-product backward-weights (``linear_grad_weight``)
and backward-data (the ``matmul`` marked ``linear_input_grad``). Batch norm and
pooling gradients read channels-last activations as they lie, and a training
forward's saved activations reach the backward in the layout they were written.
"""

from __future__ import annotations

import numpy as np
import pytest
from sol.compiler import compile_graph
from sol.errors import SolError
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference
from sol_backend_x86.flavour import onednn_paths

pytestmark = [pytest.mark.skipif(onednn_paths() is None, reason="oneDNN (onednn-devel-cpu-gomp) is not installed")]

RTOL, ATOL = 1e-4, 1e-4
RNG = np.random.default_rng(5)

#: (channels in, out, groups, kernel, stride, dilation, padding (begin, end), input size)
CASES = [
    (8, 16, 1, 3, 1, 1, (1, 1), 10),
    (8, 16, 1, 1, 2, 1, (0, 0), 10),   # a ResNet downsample: the input gradient has output_padding > padding
    (6, 6, 6, 3, 2, 1, (1, 1), 9),     # depthwise, strided
    (8, 12, 4, 3, 1, 2, (2, 2), 11),   # grouped, dilated
    (4, 8, 1, 3, 2, 1, (0, 1), 8),     # uneven padding
    (3, 16, 1, 7, 2, 1, (3, 3), 16),   # a stem
]


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _image(g: Graph, name: str, channels: int, size: int):  # type: ignore[no-untyped-def]
    return g.add_input(name, [Dim(BATCH, Purpose.N), Dim(channels, Purpose.C), Dim(size, Purpose.P),
                              Dim(size, Purpose.P)])


def _out_size(size: int, k: int, stride: int, dilation: int, pad: tuple[int, int]) -> int:
    return (size + pad[0] + pad[1] - dilation * (k - 1) - 1) // stride + 1


def _library_ops(compiled) -> list[str]:  # type: ignore[no-untyped-def]
    return [t for t in compiled.metadata["clusters"] if t.startswith("DNN ")]


def _check(g: Graph, compiled, params: dict[str, np.ndarray]) -> None:  # type: ignore[no-untyped-def]
    for batch in (1, 3):
        inputs = [_f32(batch, *[int(s) for s in t.shape[1:]]) for t in g.inputs]
        got = compiled.run_numpy(inputs, params)
        expected = run_reference(g, inputs, params)
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"batch {batch}")


@pytest.mark.parametrize(("cin", "cout", "groups", "k", "stride", "dilation", "pad", "size"), CASES)
def test_conv_grad_weight_runs_as_backward_weights(cin: int, cout: int, groups: int, k: int, stride: int,
                                                   dilation: int, pad: tuple[int, int], size: int) -> None:
    out = _out_size(size, k, stride, dilation, pad)
    g = Graph("grad_weight")
    x = _image(g, "x", cin, size)
    dy = _image(g, "dy", cout, out)
    attrs = {"stride": (stride, stride), "padding": (pad, pad), "dilation": (dilation, dilation), "groups": groups,
             "kernel": (k, k)}
    (dw,) = g.add_layer("conv_grad_weight", [x, dy], attrs, name="dw")
    g.outputs = [dw]
    compiled = compile_graph(g, "x86", passes=False)
    assert any("conv_grad_weight" in t for t in _library_ops(compiled))
    _check(g, compiled, {})


@pytest.mark.parametrize(("cin", "cout", "groups", "k", "stride", "dilation", "pad", "size"), CASES)
def test_conv_input_gradient_runs_as_backward_data(cin: int, cout: int, groups: int, k: int, stride: int,
                                                   dilation: int, pad: tuple[int, int], size: int) -> None:
    """What the conv's gradient rule emits for dx, compiled: the library call, and the numpy reference."""
    from sol.autodiff import derive

    g = Graph("conv")
    x = _image(g, "x", cin, size)
    w = g.add_param("w", _f32(cout, cin // groups, k, k))
    attrs = {"stride": (stride, stride), "padding": (pad, pad), "dilation": (dilation, dilation), "groups": groups}
    (y,) = g.add_layer("conv", [x, w], attrs, name="conv")
    g.outputs = [y]
    if pad[0] != pad[1]:  # a known limit of the gradient rule: it must say so, not compute something wrong
        with pytest.raises(SolError, match="padding"):
            derive(g, ["w"], [0])
        return
    graphs = derive(g, ["w"], [0])
    backward = graphs.backward
    ops = [layer.op for layer in backward.layers]
    assert "conv_transpose" in ops and "conv_grad_weight" in ops
    compiled = compile_graph(backward, "x86", passes=False)
    titles = _library_ops(compiled)
    assert any("conv_transpose" in t for t in titles) and any("conv_grad_weight" in t for t in titles), titles
    params = {name: t.data for name, t in backward.params.items()}
    _check(backward, compiled, params)  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [(5,), (2, 3)])
def test_linear_gradients_run_as_inner_product_backward(rows: tuple[int, ...]) -> None:
    """What the linear's gradient rule emits, compiled: backward-data and backward-weights calls, the reference."""
    from sol.autodiff import derive

    g = Graph("linear")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), *[Dim(r, Purpose.C) for r in rows[1:]], Dim(24, Purpose.C)])
    (y,) = g.add_layer("linear", [x, g.add_param("w", _f32(10, 24)), g.add_param("b", _f32(10))], {}, name="fc")
    g.outputs = [y]
    graphs = derive(g, ["w", "b"], [0])
    backward = graphs.backward
    compiled = compile_graph(backward, "x86", passes=False)
    titles = _library_ops(compiled)
    assert any("linear_grad_weight" in t for t in titles) and any("(matmul)" in t for t in titles), titles
    _check(backward, compiled, {name: t.data for name, t in backward.params.items()})  # type: ignore[misc]


def test_library_output_that_is_a_model_output_keeps_channels_last_call() -> None:
    """A conv whose result is also a model output (a saved activation) writes channels-last, then a plain copy."""
    g = Graph("saved")
    x = _image(g, "x", 8, 12)
    w = g.add_param("w", _f32(16, 8, 3, 3))
    attrs = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    (y,) = g.add_layer("conv", [x, w], attrs, name="conv")
    w2 = g.add_param("w2", _f32(16, 16, 3, 3))
    (z,) = g.add_layer("conv", [y, w2], attrs, name="conv2")
    g.outputs = [y, z]
    compiled = compile_graph(g, "x86", passes=False)
    assert "conv.layout_out" in " ".join(compiled.metadata["clusters"])
    _check(g, compiled, {"w": g.params["w"].data, "w2": g.params["w2"].data})  # type: ignore[dict-item]


def test_post_op_output_that_is_a_model_output_keeps_channels_last_call() -> None:
    """conv + relu where the relu's result is saved (a model output): still one fast library call, then a copy."""
    g = Graph("saved_relu")
    x = _image(g, "x", 8, 12)
    w = g.add_param("w", _f32(16, 8, 3, 3))
    attrs = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    (y,) = g.add_layer("conv", [x, w], attrs, name="conv")
    (r,) = g.add_layer("relu", [y], {}, name="relu")
    g.outputs = [r]
    compiled = compile_graph(g, "x86", passes=False)
    titles = " ".join(compiled.metadata["clusters"])
    assert "conv (conv) -> relu (relu)" in titles and "relu.layout_out" in titles, titles
    _check(g, compiled, {"w": g.params["w"].data})  # type: ignore[dict-item]


def _channels_last_pair(g: Graph, channels: int, size: int, dy_size: int):  # type: ignore[no-untyped-def]
    """Two channels-last activations: a 3x3 conv's output y (size x size) and a 1x1 conv's output (dy_size)."""
    x = _image(g, "x", 8, size)
    dy = _image(g, "dy", channels, dy_size)
    attrs = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    (y,) = g.add_layer("conv", [x, g.add_param("w", _f32(channels, 8, 3, 3))], attrs, name="conv")
    (dyc,) = g.add_layer("conv", [dy, g.add_param("w2", _f32(channels, channels, 1, 1))],
                         dict(attrs, padding=((0, 0), (0, 0))), name="conv_dy")
    return y, dyc


@pytest.mark.parametrize("channels", [16, 20])  # one full block of 16 channels; a block and a partial one
def test_batch_norm_training_kernels_run_channels_last(channels: int) -> None:
    """batch_norm_train(+grad) on a conv's channels-last output: no conversion to plain, the reference's numbers."""
    g = Graph("bn_cl")
    y, dyc = _channels_last_pair(g, channels, 9, 9)
    gamma, beta = g.add_param("gamma", _f32(channels)), g.add_param("beta", _f32(channels))
    normed, mean, invstd, var = g.add_layer("batch_norm_train", [y, gamma, beta], {"eps": 1e-5}, name="bn")
    (act,) = g.add_layer("relu", [normed], {}, name="relu")
    grads = g.add_layer("batch_norm_train_grad", [dyc, y, mean, invstd, gamma], {}, name="bn_grad")
    g.outputs = [act, mean, invstd, var, *grads]
    compiled = compile_graph(g, "x86", passes=False)
    titles = " ".join(compiled.metadata["clusters"])
    assert "bn.layout" not in titles and "bn_grad.layout" not in titles, titles
    _check(g, compiled, {name: t.data for name, t in g.params.items()})  # type: ignore[misc]


def test_free_layout_outputs_are_reported_and_read_back_in_that_layout() -> None:
    """A saved activation stays channels-last: the forward reports its layout, a backward reading it gets it."""
    from sol.autodiff import derive

    g = Graph("saved_cl")
    x = _image(g, "x", 8, 10)
    attrs = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    (y,) = g.add_layer("conv", [x, g.add_param("w", _f32(16, 8, 3, 3))], attrs, name="conv")
    (r,) = g.add_layer("relu", [y], {}, name="relu")
    (z,) = g.add_layer("conv", [r, g.add_param("w2", _f32(4, 16, 3, 3))], attrs, name="conv2")
    g.outputs = [z]
    graphs = derive(g, ["w", "w2"])
    forward, backward = graphs.forward, graphs.backward
    graphs.free_saved_layouts()
    compiled_forward = compile_graph(forward, "x86", passes=False)
    layouts = compiled_forward.metadata["output_layouts"]
    assert layouts, "the saved conv/relu activations should stay channels-last"
    graphs.read_saved_layouts(layouts)
    compiled_backward = compile_graph(backward, "x86", passes=False)
    params = {name: t.data for name, t in g.params.items()}
    for batch in (1, 3):
        inputs = [_f32(batch, 8, 10, 10)]
        outputs = compiled_forward.run_numpy(inputs, params)
        expected = run_reference(forward, inputs, params)
        np.testing.assert_allclose(outputs[0], expected[0], rtol=RTOL, atol=ATOL)
        dz = _f32(*outputs[0].shape)
        saved = [inputs[s.index] if s.source == "input" else outputs[s.index] for s in graphs.saved]
        got = compiled_backward.run_numpy([dz, *saved], params)
        # the reference reads every saved value plain: its own forward's outputs
        want = run_reference(backward, [dz, *[inputs[s.index] if s.source == "input" else expected[s.index]
                                              for s in graphs.saved]], params)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"batch {batch}")


@pytest.mark.parametrize("channels", [16, 20])
def test_pooling_gradients_run_channels_last(channels: int) -> None:
    """max/avg pooling gradients of channels-last activations: per channel block, the reference's numbers."""
    g = Graph("pool_grad_cl")
    y, dyc = _channels_last_pair(g, channels, 9, 5)
    window = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": False,
              "input_shape": y.shape}
    (dmax,) = g.add_layer("max_pool_grad", [dyc, y], window, name="max_grad")
    (davg,) = g.add_layer("avg_pool_grad", [dyc], dict(window, count_include_pad=False, divisor_override=None),
                          name="avg_grad")
    g.outputs = [dmax, davg]
    compiled = compile_graph(g, "x86", passes=False)
    titles = " ".join(compiled.metadata["clusters"])
    assert "max_grad.layout" not in titles and "avg_grad.layout" not in titles, titles
    _check(g, compiled, {name: t.data for name, t in g.params.items()})  # type: ignore[misc]
