"""The oneDNN DNN module end to end: post-op fusion, layouts and reorders, prepare, wildcard batch, DFP-only mode.

Every graph is compiled for x86 with oneDNN and compared with SOL's numpy
reference (rtol 1e-4, atol 1e-5, like the model tests).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sol
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose, Tensor
from sol.ir.interpret import run_reference
from sol_backend_x86.flavour import X86Flavour, onednn_paths

pytestmark = pytest.mark.skipif(onednn_paths() is None, reason="oneDNN (onednn-devel-cpu-gomp) is not installed")

RTOL, ATOL = 1e-4, 1e-5
sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
import _graph_builders as builders  # noqa: E402

RNG = np.random.default_rng(3)
CONV = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}


@pytest.fixture(autouse=True)
def _onednn_only() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        # these tests are about oneDNN's calls; SOL's Winograd kernel has its own (test_winograd.py)
        mp.setitem(sol.config, "x86::winograd", False)
        yield


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return builders.f32(RNG, *shape, scale=scale)


def _image(g: Graph, name: str, channels: int, size: int) -> Tensor:
    return g.add_input(name, [Dim(BATCH, Purpose.N), Dim(channels, Purpose.C), Dim(size, Purpose.P),
                              Dim(size, Purpose.P)])


def _conv(g: Graph, x: Tensor, name: str, cin: int, cout: int, k: int = 3, groups: int = 1, stride: int = 1) -> Tensor:
    return builders.conv(RNG, g, x, name, cin, cout, k, groups, stride)


def _compile(g: Graph, dnn: bool = True):  # type: ignore[no-untyped-def]
    return compile_graph(g, "x86" if dnn else None, passes=False) if dnn else \
        _compile_with(g, X86Flavour(dnn=False))


def _compile_with(g: Graph, flavour: X86Flavour):  # type: ignore[no-untyped-def]
    import sol.compiler as compiler

    original = compiler.flavour_for
    compiler.flavour_for = lambda device: (flavour, 0)  # type: ignore[assignment]
    try:
        return compile_graph(g, "x86", passes=False)
    finally:
        compiler.flavour_for = original  # type: ignore[assignment]


def _params(g: Graph) -> dict[str, np.ndarray]:
    return {name: t.data for name, t in g.params.items()}  # type: ignore[misc]


def _check(g: Graph, compiled, batches: tuple[int, ...] = (1, 3), params: dict | None = None) -> None:  # type: ignore[no-untyped-def]
    params = params or _params(g)
    for batch in batches:
        inputs = [_f32(batch, *[int(s) for s in t.shape[1:]]) for t in g.inputs]
        got = compiled.run_numpy(inputs, params)
        expected = run_reference(g, inputs, params)
        for name, a, b in zip([t.name for t in g.outputs], got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"{name} at batch {batch}")


def _library_titles(compiled) -> list[str]:  # type: ignore[no-untyped-def]
    return [t for t in compiled.metadata["clusters"] if t.startswith("DNN ")]


def test_conv_bias_relu_residual_relu_is_one_call() -> None:
    g = Graph("residual")
    x = _image(g, "x", 8, 10)
    (y,) = g.add_layer("relu", [_conv(g, x, "conv1", 8, 8)], name="relu1")
    y = _conv(g, y, "conv2", 8, 8)
    (y,) = g.add_layer("add", [y, x], name="residual")
    (y,) = g.add_layer("relu", [y], name="relu2")
    g.outputs = [y]
    compiled = _compile(g)
    assert _library_titles(compiled) == ["DNN conv1 (conv) -> relu1 (relu)",
                                         "DNN conv2 (conv) -> residual (add) -> relu2 (relu)"]
    _check(g, compiled)


@pytest.mark.parametrize("op,attrs", [
    ("clamp", {"min": 0.0, "max": 6.0}), ("hardswish", {}), ("sigmoid", {}), ("silu", {}), ("tanh", {}),
    ("gelu", {}), ("gelu", {"approximate": "tanh"}), ("leaky_relu", {"negative_slope": 0.1}), ("elu", {"alpha": 0.5}),
    ("hardsigmoid", {}),
])
def test_eltwise_post_ops(op: str, attrs: dict) -> None:
    g = Graph(f"post_{op}")
    x = _image(g, "x", 8, 6)
    (y,) = g.add_layer(op, [_conv(g, x, "conv", 8, 16)], attrs, name="act")
    g.outputs = [y]
    compiled = _compile(g)
    assert _library_titles(compiled) == [f"DNN conv (conv) -> act ({op})"]
    _check(g, compiled)


def test_binary_post_ops_broadcast_per_channel_and_full() -> None:
    g = Graph("binary")
    x = _image(g, "x", 8, 6)
    other = _image(g, "other", 16, 6)
    scale = g.add_param("scale", _f32(1, 16, 1, 1))
    (y,) = g.add_layer("mul", [_conv(g, x, "conv", 8, 16), scale], name="scale")
    (y,) = g.add_layer("sub", [y, other], name="minus")
    g.outputs = [y]
    compiled = _compile(g)
    assert _library_titles(compiled) == ["DNN conv (conv) -> scale (mul) -> minus (sub)"]
    _check(g, compiled)


def test_depthwise_strided_and_transposed_convolutions() -> None:
    g = Graph("convs")
    x = _image(g, "x", 16, 9)
    y = _conv(g, x, "dw", 16, 16, groups=16)
    y = _conv(g, y, "down", 16, 8, stride=2)
    w = g.add_param("up.weight", _f32(8, 4, 3, 3, scale=0.3))
    attrs = {"stride": (2, 2), "padding": (1, 1), "output_padding": (1, 1), "dilation": (1, 1), "groups": 2}
    (y,) = g.add_layer("conv_transpose", [y, w], attrs, name="up")
    g.outputs = [y]
    compiled = _compile(g)
    assert len(_library_titles(compiled)) == 3
    _check(g, compiled)


@pytest.mark.parametrize("batch", [1, BATCH])
def test_squeeze_excitation_fcs_of_one_image_run_as_generated_dot_products(batch: object) -> None:
    """1x1 convolutions of a 1x1 image at batch 1 (efficientnet's SE layers) are matrix-vector products: SOL's
    generated code runs them; with a batch dimension they stay oneDNN calls."""
    g = Graph(f"se_{batch}")
    x = g.add_input("x", [Dim(batch, Purpose.N), Dim(24, Purpose.C), Dim(1, Purpose.P), Dim(1, Purpose.P)])
    (y,) = g.add_layer("silu", [_conv(g, x, "fc1", 24, 40, k=1)], name="act")
    (y,) = g.add_layer("sigmoid", [_conv(g, y, "fc2", 40, 24, k=1)], name="gate")
    g.outputs = [y]
    compiled = _compile(g)
    if batch == 1:
        assert _library_titles(compiled) == []
        _check(g, compiled, batches=(1,))
    else:
        assert _library_titles(compiled) == ["DNN fc1 (conv) -> act (silu)", "DNN fc2 (conv) -> gate (sigmoid)"]
        _check(g, compiled)
        _check(g, _compile(g, dnn=False))  # the generated dot products at batches 1 and 3


def _gated_conv(batch: object, channels: int, out: int, k: int, size: int, gate_first: bool = False,
                residual: bool = False) -> Graph:
    """Squeeze-excitation: a depthwise conv's x times a gate computed from x ([N, C, 1, 1]) into a k x k convolution,
    optionally + x. x comes from a conv, so it lies channels-last like the product (as in EfficientNet)."""
    g = Graph(f"gated_{batch}_{channels}_{out}_{k}_{size}_{int(gate_first)}_{int(residual)}")
    image = g.add_input("image", [Dim(batch, Purpose.N), Dim(channels, Purpose.C), Dim(size, Purpose.P),
                                  Dim(size, Purpose.P)])
    x = _conv(g, image, "dw", channels, channels, groups=channels)
    (squeezed,) = g.add_layer("adaptive_avg_pool", [x], {"output_size": (1, 1)}, name="squeeze")
    (gate,) = g.add_layer("sigmoid", [squeezed], name="gate")
    (scaled,) = g.add_layer("mul", [gate, x] if gate_first else [x, gate], name="scale")
    y = _conv(g, scaled, "project", channels, out, k=k)
    if residual:
        (y,) = g.add_layer("add", [y, x], name="residual")
    g.outputs = [y]
    return g


@pytest.mark.parametrize("channels,out,k,size,gate_first,residual", [
    (24, 8, 1, 12, False, False),   # efficientnet's projection after the gate
    (24, 24, 1, 16, True, True),    # gate * x, and a residual add as a binary post-op before the factors
    (20, 12, 3, 32, False, False),  # a 3x3 kernel: zero padding; 20 channels: oneDNN pads its packed format
])
def test_squeeze_excitation_gate_is_folded_into_the_weights(channels: int, out: int, k: int, size: int,
                                                            gate_first: bool, residual: bool) -> None:
    """At batch 1 the call reads x and multiplies its packed weights by the gate (x86/input_scale.py)."""
    g = _gated_conv(1, channels, out, k, size, gate_first, residual)
    compiled = _compile(g)
    title = "DNN scale (mul) -> project (conv)" + (" -> residual (add)" if residual else "")
    assert _library_titles(compiled) == ["DNN dw (conv)", title]
    _check(g, compiled, batches=(1,))


@pytest.mark.parametrize("batch,size,enabled", [(BATCH, 12, True), (1, 4, True), (1, 12, False)])
def test_squeeze_excitation_gate_stays_a_multiply(batch: object, size: int, enabled: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With a batch dimension, with weights bigger than 1/8 of the scaled tensor (4x4 image), or with
    x86::fold_input_scale off, the multiply is generated code before the call."""
    monkeypatch.setitem(sol.config, "x86::fold_input_scale", enabled)
    g = _gated_conv(batch, 24, 8, 1, size)
    compiled = _compile(g)
    assert _library_titles(compiled) == ["DNN dw (conv)", "DNN project (conv)"]
    _check(g, compiled, batches=(1, 3) if batch is BATCH else (1,))


def test_linear_and_batched_matmul_with_post_ops() -> None:
    g = Graph("gemms")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(5, Purpose.S), Dim(12, Purpose.C)])
    w = g.add_param("fc.weight", _f32(12, 12, scale=0.3))
    b = g.add_param("fc.bias", _f32(12))
    (h,) = g.add_layer("linear", [x, w, b], name="fc")
    (h,) = g.add_layer("gelu", [h], name="gelu")
    (h,) = g.add_layer("add", [h, x], name="residual")
    (k,) = g.add_layer("permute", [h], {"perm": (0, 2, 1)}, name="keys")
    (s,) = g.add_layer("matmul", [h, k], name="scores")
    g.outputs = [s]
    compiled = _compile(g)
    assert _library_titles(compiled) == ["DNN fc (linear) -> gelu (gelu) -> residual (add)", "DNN scores (matmul)"]
    _check(g, compiled)


@pytest.mark.parametrize("scale,heads", [(None, 4), (0.2, 1)])
def test_big_unmasked_attention_runs_as_two_matmuls(scale: float | None, heads: int) -> None:
    """q @ k^T (k read transposed in place, the scale its post-op) and p @ v are oneDNN calls; the softmax is DFP."""
    g = Graph("attention")
    shape = [Dim(BATCH, Purpose.N), Dim(heads, Purpose.C), Dim(160, Purpose.S), Dim(48, Purpose.C)]
    q, k, v = (g.add_input(n, shape) for n in "qkv")
    (y,) = g.add_layer("attention", [q, k, v], {"scale": scale, "is_causal": False}, name="attn")
    g.outputs = [y]
    compiled = _compile(g)
    assert _library_titles(compiled) == ["DNN attn.scores (matmul) -> attn.scaled (mul)", "DNN attn (matmul)"]
    _check(g, compiled, batches=(1, 2))


@pytest.mark.parametrize("dnn", [True, False])
def test_matmul_reading_b_transposed(dnn: bool) -> None:
    g = Graph("transposed")
    a = g.add_input("a", [Dim(BATCH, Purpose.N), Dim(3, Purpose.C), Dim(5, Purpose.S), Dim(12, Purpose.C)])
    b = g.add_input("b", [Dim(BATCH, Purpose.N), Dim(3, Purpose.C), Dim(7, Purpose.S), Dim(12, Purpose.C)])
    (y,) = g.add_layer("matmul", [a, b], {"transpose_b": True}, name="scores")
    g.outputs = [y]
    compiled = _compile(g, dnn)
    assert _library_titles(compiled) == (["DNN scores (matmul)"] if dnn else [])
    _check(g, compiled)


def test_small_attention_stays_one_fused_loop() -> None:
    g = Graph("attention_small")
    small = [Dim(BATCH, Purpose.N), Dim(2, Purpose.C), Dim(16, Purpose.S), Dim(8, Purpose.C)]
    q, k, v = (g.add_input(n, small) for n in "qkv")
    (y,) = g.add_layer("attention", [q, k, v], {"scale": None, "is_causal": False}, name="small")
    (z,) = g.add_layer("attention", [k, q, v], {"scale": None, "is_causal": True}, name="small_causal")
    g.outputs = [y, z]
    compiled = _compile(g)
    assert _library_titles(compiled) == []
    _check(g, compiled, batches=(1,))


@pytest.mark.parametrize("mask,causal", [("bool", False), ("float", True), (None, True)])
def test_big_masked_or_causal_attention_runs_as_two_matmuls(mask: str | None, causal: bool) -> None:
    """BERT's and GPT-2's [1, 1, L, S] bool masks, additive masks and the causal limit are applied between the
    two oneDNN calls (the fused loop took 0.9 ms per BERT-base layer on one AVX-512 core, the matmuls 0.5)."""
    g = Graph("masked_attention")
    shape = [Dim(BATCH, Purpose.N), Dim(4, Purpose.C), Dim(160, Purpose.S), Dim(48, Purpose.C)]
    q, k, v = (g.add_input(n, shape) for n in "qkv")
    inputs = [q, k, v]
    if mask == "bool":
        keep = np.random.default_rng(3).random((1, 1, 160, 160)) > 0.3
        keep[..., 0] = True  # no fully masked row
        inputs.append(g.add_const("keep", keep))
    elif mask == "float":
        inputs.append(g.add_param("bias", _f32(4, 160, 160)))
    (y,) = g.add_layer("attention", inputs, {"scale": None, "is_causal": causal}, name="attn")
    g.outputs = [y]
    compiled = _compile(g)
    assert _library_titles(compiled) == ["DNN attn.scores (matmul) -> attn.scaled (mul)", "DNN attn (matmul)"]
    _check(g, compiled, batches=(1, 2))


def test_channels_last_flows_through_dfp_clusters_without_reorders() -> None:
    """conv -> maxpool -> concat -> conv: everything between the calls stays channels-last."""
    g = Graph("layouts")
    x = _image(g, "x", 3, 12)
    a = _conv(g, x, "a", 3, 8)
    (p,) = g.add_layer("max_pool", [a], {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0)}, name="pool")
    b = _conv(g, p, "b", 8, 8)
    (c,) = g.add_layer("concat", [p, b], {"axis": 1}, name="cat")
    y = _conv(g, c, "c", 16, 4)
    (f,) = g.add_layer("reshape", [y], {"shape": (BATCH, 4 * 6 * 6)}, name="flatten")
    g.outputs = [f]
    compiled = _compile(g)
    source = compiled.source_path.read_text()
    # one reorder into channels-last (the model input) and one out (for the reshape); none between the calls
    conversions = [t for t in compiled.metadata["clusters"] if ".layout" in t]
    assert len(conversions) == 2, conversions
    assert "order [0, 2, 3, 1]" in source
    _check(g, compiled)


def test_convnext_block_permutes_are_free_views_and_its_scaled_residual_post_ops() -> None:
    """depthwise conv -> permute to NHWC -> Linear -> GELU -> Linear -> permute to NCHW -> layer scale -> residual.

    Channels-last, both permutes leave every element where it is (no cluster of their own), and the layer scale
    and the residual add move before the second permute (`sol.passes.elementwise_before_permute`) into the
    second Linear's call.
    """
    g = Graph("convnext_block")
    x = _conv(g, _image(g, "x", 3, 6), "stem", 3, 8)  # channels-last, like the block's input in the model
    (h,) = g.add_layer("permute", [_conv(g, x, "dw", 8, 8, groups=8)], {"perm": (0, 2, 3, 1)}, name="to_nhwc")
    (h,) = g.add_layer("linear", [h, g.add_param("fc1.weight", _f32(16, 8)), g.add_param("fc1.bias", _f32(16))],
                       name="fc1")
    (h,) = g.add_layer("gelu", [h], name="gelu")
    (h,) = g.add_layer("linear", [h, g.add_param("fc2.weight", _f32(8, 16)), g.add_param("fc2.bias", _f32(8))],
                       name="fc2")
    (y,) = g.add_layer("permute", [h], {"perm": (0, 3, 1, 2)}, name="to_nchw")
    (y,) = g.add_layer("mul", [g.add_param("gamma", _f32(8, 1, 1)), y], name="scale")
    (y,) = g.add_layer("add", [y, x], name="residual")
    g.outputs = [_conv(g, y, "next", 8, 4)]
    compiled = compile_graph(g, "x86")
    clusters = compiled.metadata["clusters"]
    assert not [t for t in clusters if "(permute)" in t], clusters
    assert "DNN fc2 (linear) -> scale (mul) -> residual (add)" in _library_titles(compiled)
    _check(g, compiled)


def test_global_pools_of_channels_last_tensors() -> None:
    """Squeeze-excitation style: global avg/max pool straight off a conv (NHWC), 20 channels (a partial block)."""
    g = Graph("global_pools")
    x = _image(g, "x", 3, 9)
    a = _conv(g, x, "a", 3, 20)
    (avg,) = g.add_layer("adaptive_avg_pool", [a], {"output_size": (1, 1)}, name="avg")
    (mx,) = g.add_layer("adaptive_max_pool", [a], {"output_size": (1, 1)}, name="max")
    g.outputs = [avg, mx]
    compiled = _compile(g)
    assert "(cb * 16 + j)" in compiled.source_path.read_text()  # the per-cache-line channel blocks
    _check(g, compiled)


def test_prepare_reruns_after_weights_change() -> None:
    g = Graph("reprepare")
    x = _image(g, "x", 4, 5)
    y = _conv(g, x, "conv", 4, 4)
    g.outputs = [y]
    compiled = _compile(g)
    first = _params(g)
    _check(g, compiled, params=first)
    second = {name: (value * -2.0).astype(np.float32) for name, value in first.items()}
    _check(g, compiled, params=second)  # run_numpy prepares with the new weights: the packed copy follows


def test_same_artifact_twice_keeps_weights_apart() -> None:
    """Two models sharing one library (same structure) pack their weights into their own derived areas."""
    def model() -> Graph:
        g = Graph("twins")
        x = _image(g, "x", 4, 5)
        g.outputs = [_conv(g, x, "conv", 4, 4)]
        return g

    g1, g2 = model(), model()
    c1, c2 = _compile(g1), _compile(g2)
    assert c1.library_path == c2.library_path
    inputs = [_f32(1, 4, 5, 5)]
    p1, p2 = _params(g1), _params(g2)
    c1.prepare([p.ctypes.data for p in p1.values()])
    c2.prepare([p.ctypes.data for p in p2.values()])
    for compiled, g, params in ((c1, g1, p1), (c2, g2, p2)):
        out = np.empty((1, 4, 5, 5), np.float32)
        compiled.run([inputs[0].ctypes.data], [p.ctypes.data for p in params.values()], [out.ctypes.data], 1)
        np.testing.assert_allclose(out, run_reference(g, inputs, params)[0], rtol=RTOL, atol=ATOL)


def test_dfp_only_mode_generates_library_free_code() -> None:
    g = Graph("dfp_only")
    x = _image(g, "x", 4, 6)
    (y,) = g.add_layer("relu", [_conv(g, x, "conv", 4, 8)], name="relu")
    g.outputs = [y]
    compiled = _compile(g, dnn=False)
    assert not _library_titles(compiled)
    assert "sol_dnnl" not in compiled.source_path.read_text()
    _check(g, compiled)


def _linked(library: Path) -> str:
    """What a built model was linked with: its needed libraries (readelf -d) and its symbols (nm)."""
    import subprocess

    return "".join(subprocess.run(command, capture_output=True, text=True, check=True).stdout
                   for command in (["readelf", "-d", str(library)], ["nm", str(library)]))


def test_only_models_with_library_calls_link_the_glue() -> None:
    """A model of generated loops alone links neither the glue object nor oneDNN (its build is 0.2 s shorter); one
    with a library call links both. The flavour is the same oneDNN-enabled one for both."""
    plain = Graph("no_calls")
    x = _image(plain, "x", 4, 6)
    (y,) = plain.add_layer("relu", [x], name="relu")
    plain.outputs = [y]
    with_call = Graph("one_call")
    x = _image(with_call, "x", 4, 6)
    (y,) = with_call.add_layer("relu", [_conv(with_call, x, "conv", 4, 8)], name="relu")
    with_call.outputs = [y]
    linked = {g.name: _linked(_compile(g).library_path) for g in (plain, with_call)}
    assert "libdnnl" not in linked["no_calls"] and "sol_dnnl_create" not in linked["no_calls"]
    assert "libdnnl" in linked["one_call"] and "sol_dnnl_create" in linked["one_call"]
    _check(plain, _compile(plain))
    _check(with_call, _compile(with_call))
