"""bf16 depthwise convolutions (glue/sol_depthwise.cpp) and squeeze-excitation gates folded in bf16.

In precision="bf16" a depthwise convolution between bf16 library calls reads and writes bf16 activations; SOL's
own AVX-512 kernel runs it (grouped.choose) instead of oneDNN 3.2's jit_dw. Each graph puts a depthwise layer
between two 1x1 convolutions (so its input and output are stored as bf16) and checks it against SOL's float64
reference with the bf16 bound of test_precision. The shapes cover the kernel's compiled-in widths and strides
(3x3, 5x5, 7x7; strides 1 and 2), the generic path (1x3, stride 3), pixels on both borders, channel counts that
are not a multiple of 32 or of 16 (the masked last block), and every eltwise post-op it computes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import sol
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose, Tensor
from sol.ir.interpret import run_reference
from sol_backend_x86 import cpuinfo, grouped, precision, tuning
from sol_backend_x86.flavour import X86Flavour, onednn_paths

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
import _graph_builders as builders  # noqa: E402

RNG = np.random.default_rng(5)
BF16_BOUND = 2e-2  # as test_precision: bf16 operands, fp32 accumulation
FP32_ABOVE = 1e-5  # an fp32 run stays near 1e-6: the check that bf16 ran

pytestmark = pytest.mark.skipif(
    onednn_paths() is None or not precision.native_bf16()
    or not all(f in cpuinfo.host_flags() for f in grouped.BF16_KERNEL_FLAGS),
    reason="needs oneDNN and a CPU with AVX-512BW and AVX512-BF16 (the bf16 depthwise kernel's instructions)")


@pytest.fixture
def untimed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sol.config, "autotuning", False)


def _conv(g: Graph, x: Tensor, name: str, cin: int, cout: int, kernel: tuple[int, int] = (1, 1), groups: int = 1,
          stride: int = 1) -> Tensor:
    kh, kw = kernel
    w = g.add_param(f"{name}.weight", builders.f32(RNG, cout, cin // groups, kh, kw,
                                                   scale=1 / (kh * kw * cin / groups) ** 0.5))
    b = g.add_param(f"{name}.bias", builders.f32(RNG, cout))
    attrs = {"stride": (stride, stride), "padding": ((kh // 2, kh // 2), (kw // 2, kw // 2)), "dilation": (1, 1),
             "groups": groups}
    (y,) = g.add_layer("conv", [x, w, b], attrs, name=name)
    return y


def _errors(g: Graph, compiled, batch: int) -> list[float]:  # type: ignore[no-untyped-def]
    params = {name: t.data for name, t in g.params.items()}
    inputs = [builders.f32(RNG, batch, *[int(s) for s in t.shape[1:]]) for t in g.inputs]
    got = compiled.run_numpy(inputs, params)
    exact = run_reference(g, [i.astype(np.float64) for i in inputs],
                          {k: np.asarray(v, np.float64) for k, v in params.items()})
    return [float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(got, exact, strict=True)]


def _stored_bf16(source: str) -> set[str]:
    return set(re.findall(r"uint16_t\* \w+ = \(uint16_t\*\)\(.*?\);  // (\S+) \[.*stored as bfloat16\)", source))


def _depthwise_graph(name: str, channels: int, kernel: tuple[int, int], stride: int, height: int, width: int,
                     activation: str | None) -> Graph:
    """1x1 conv -> depthwise conv (-> activation) -> 1x1 conv."""
    g = Graph(name)
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(8, Purpose.C), Dim(height, Purpose.P), Dim(width, Purpose.P)])
    h = _conv(g, x, "expand", 8, channels)
    h = _conv(g, h, "dw", channels, channels, kernel, channels, stride)
    if activation == "clamp":
        (h,) = g.add_layer("clamp", [h], {"min": 0.0, "max": 6.0}, name="act")
    elif activation is not None:
        (h,) = g.add_layer(activation, [h], name="act")
    g.outputs = [_conv(g, h, "project", channels, 8)]
    return g


@pytest.mark.parametrize("channels,kernel,stride,height,width,activation", [
    (32, (3, 3), 1, 13, 19, "clamp"),      # one full block; 19 = 8 + 8 + 1 inside pixels plus both borders
    (48, (3, 3), 2, 15, 22, "relu"),       # a masked second block of 16; stride 2, odd height
    (20, (3, 3), 1, 9, 9, "silu"),         # 20 channels: not a multiple of 16
    (144, (5, 5), 1, 14, 30, "hardswish"),  # EfficientNet's 5x5; five blocks, the last masked
    (40, (5, 5), 2, 17, 17, "sigmoid"),    # 5x5 stride 2
    (16, (7, 7), 1, 12, 12, "gelu"),       # ConvNeXt's 7x7, rows shorter than the kernel's reach on both sides
    (24, (1, 3), 3, 7, 20, None),          # no compiled-in case: the generic path, bias only
])
@pytest.mark.usefixtures("untimed")
def test_bf16_depthwise_matches_reference(channels: int, kernel: tuple[int, int], stride: int, height: int,
                                          width: int, activation: str | None) -> None:
    g = _depthwise_graph(f"dw_bf16_{channels}_{kernel[0]}{kernel[1]}_{stride}_{height}_{width}", channels, kernel,
                         stride, height, width, activation)
    compiled = compile_graph(g, "x86", passes=False, precision="bf16")
    source = compiled.source_path.read_text()
    assert source.count("see sol_depthwise.h") == 1
    assert {"expand", "act" if activation else "dw"} <= _stored_bf16(source)  # bf16 in and out of the kernel
    for batch in (1, 2):
        for error in _errors(g, compiled, batch):
            assert FP32_ABOVE < error <= BF16_BOUND, f"{g.name} at batch {batch}: relative error {error:.2e}"


def test_the_kernel_runs_and_is_timed_against_onednn_in_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuning library's bf16 timing ran SOL's kernel (a fallback to oneDNN is reported as -1, not timed), and
    choose keeps the faster one by the margin."""
    tuner = X86Flavour().dnn.tuner  # type: ignore[union-attr]
    assert tuner is not None
    for shape in ((1, 28, 28, 96, 96, 96, 3, 3, 1, 1, 1, 1, 1, 1), (2, 15, 15, 40, 40, 40, 5, 5, 2, 2, 2, 2, 2, 2)):
        timings = tuner.timings(shape, (tuning.DIRECT, grouped.GROUPED), kind="conv bf16")
        assert all(seconds > 0 for seconds in timings.values()), (shape, timings)
    g = _depthwise_graph("dw_tuned", 96, (3, 3), 1, 56, 56, None)  # 2.7M multiply-adds: worth a timing
    layer = g.layers[1]
    assert grouped.depthwise(layer) and grouped.worth_timing(grouped.shape_of(layer))  # type: ignore[arg-type]
    monkeypatch.setitem(sol.config, "autotuning", True)
    for sol_seconds, chosen in ((0.5e-3, True), (1.01e-3 * tuning.MARGIN, False)):
        def timed(shape, algorithms, kind="conv", s=sol_seconds):  # type: ignore[no-untyped-def]
            assert kind == "conv bf16"
            return {0: 1e-3, grouped.GROUPED: s}
        monkeypatch.setattr(tuner, "timings", timed)
        assert grouped.choose(layer, [], tuner, "bf16") is chosen


def test_depthwise_layers_the_kernel_cannot_run_stay_with_onednn(monkeypatch: pytest.MonkeyPatch) -> None:
    """A residual add (binary post-op), a tanh, dilation, and x86::grouped off: oneDNN's bf16 kernel."""
    monkeypatch.setitem(sol.config, "autotuning", False)
    g = _depthwise_graph("dw_not", 32, (3, 3), 1, 10, 10, None)
    layer = g.layers[1]
    g.add_layer("add", [layer.outputs[0], layer.inputs[0]], name="residual")
    g.add_layer("tanh", [layer.outputs[0]], name="tanh")
    add, tanh = g.layers[-2:]
    assert grouped.choose(layer, [], None, "bf16")
    assert not grouped.choose(layer, [add], None, "bf16")
    assert not grouped.choose(layer, [tanh], None, "bf16")
    assert not grouped.choose(layer, [], None, "fp32")  # fp32: oneDNN's depthwise kernels are the fast ones
    dilated = Graph("dw_dilated")
    x = dilated.add_input("x", [Dim(BATCH, Purpose.N), Dim(32, Purpose.C), Dim(10, Purpose.P), Dim(10, Purpose.P)])
    w = dilated.add_param("w", builders.f32(RNG, 32, 1, 3, 3))
    dilated.add_layer("conv", [x, w], {"stride": (1, 1), "padding": ((2, 2), (2, 2)), "dilation": (2, 2),
                                       "groups": 32}, name="dw")
    assert not grouped.choose(dilated.layers[0], [], None, "bf16")
    monkeypatch.setitem(sol.config, "x86::grouped", False)
    assert not grouped.choose(layer, [], None, "bf16")
    compiled = compile_graph(_depthwise_graph("dw_off", 32, (3, 3), 1, 10, 10, "clamp"), "x86", passes=False,
                             precision="bf16")
    assert "sol_depthwise.h" not in compiled.source_path.read_text()


def _squeeze_excitation(name: str) -> Graph:
    """EfficientNet's block at batch 1: expand -> depthwise + silu -> gate (pool, fc, silu, fc, sigmoid) ->
    x * gate -> 1x1 projection, whose weights (16 x 64) are far smaller than the 64 x 24 x 24 map it reads."""
    g = Graph(name)
    x = g.add_input("x", [Dim(1, Purpose.N), Dim(16, Purpose.C), Dim(24, Purpose.P), Dim(24, Purpose.P)])
    h = _conv(g, x, "expand", 16, 64)
    (h,) = g.add_layer("silu", [_conv(g, h, "dw", 64, 64, (3, 3), 64)], name="dw_act")
    (s,) = g.add_layer("adaptive_avg_pool", [h], {"output_size": (1, 1)}, name="squeeze")
    (s,) = g.add_layer("silu", [_conv(g, s, "reduce", 64, 8)], name="reduce_act")
    (s,) = g.add_layer("sigmoid", [_conv(g, s, "gate", 8, 64)], name="gate_act")
    (h,) = g.add_layer("mul", [h, s], name="excite")
    g.outputs = [_conv(g, h, "project", 64, 16)]
    return g


@pytest.mark.usefixtures("untimed")
def test_squeeze_excitation_gate_is_folded_in_bf16() -> None:
    """The gate multiplies the projection's fp32 weights, which are packed as bf16 on every call: the scaled map
    is never written, and the depthwise output it was computed from is stored as bf16 (read by the projection and
    the pool). The result matches the float64 reference, also when the gate changes between calls."""
    g = _squeeze_excitation("se_bf16")
    compiled = compile_graph(g, "x86", passes=False, precision="bf16")
    source = compiled.source_path.read_text()
    assert "d->src_scale = 1;  // excite (mul)" in source
    assert "dw_act" in _stored_bf16(source)
    for _ in range(3):  # new inputs, so new gates, each call
        for error in _errors(g, compiled, 1):
            assert FP32_ABOVE < error <= BF16_BOUND, f"relative error {error:.2e}"
