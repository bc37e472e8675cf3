"""SOL's direct grouped/depthwise convolution (glue/sol_grouped.cpp) and how layers are chosen for it.

Each case runs one grouped conv (plus post-ops) through the kernel and checks it
against the numpy reference. The cases cover the kernel's three modes (groups
of 1, 2 or 4 channels in-register; groups of 8k channels broadcast), the kernel
widths and strides with a compiled-in loop (3x3, 5x5, 7x7, strides 1 and 2) and
a generic one (1x3, stride 3), pixels touching the borders, rows of every
length modulo 8, and channel counts beyond one task's 64.
"""

from __future__ import annotations

import numpy as np
import pytest
import sol
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose, Tensor
from sol.ir.interpret import run_reference
from sol_backend_x86 import grouped, tuning
from sol_backend_x86.flavour import X86Flavour, onednn_paths

pytestmark = [pytest.mark.skipif(onednn_paths() is None, reason="oneDNN (onednn-devel-cpu-gomp) is not installed")]

RNG = np.random.default_rng(11)


@pytest.fixture
def always_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every eligible conv runs as SOL's grouped kernel (no timing)."""
    monkeypatch.setitem(sol.config, "autotuning", False)
    monkeypatch.setattr(grouped, "heuristic", lambda shape: True)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _image(g: Graph, name: str, channels: int, height: int, width: int) -> Tensor:
    return g.add_input(name, [Dim(BATCH, Purpose.N), Dim(channels, Purpose.C), Dim(height, Purpose.P),
                              Dim(width, Purpose.P)])


def _conv(g: Graph, x: Tensor, name: str, cin: int, cout: int, groups: int, kernel: tuple[int, int],
          stride: int = 1, padding: tuple[tuple[int, int], tuple[int, int]] | None = None) -> Tensor:
    kh, kw = kernel
    w = g.add_param(f"{name}.weight", _f32(cout, cin // groups, kh, kw, scale=1 / (kh * kw * cin / groups) ** 0.5))
    b = g.add_param(f"{name}.bias", _f32(cout))
    pads = padding if padding is not None else ((kh // 2, kh // 2), (kw // 2, kw // 2))
    attrs = {"stride": (stride, stride), "padding": pads, "dilation": (1, 1), "groups": groups}
    (y,) = g.add_layer("conv", [x, w, b], attrs, name=name)
    return y


def _grouped_calls(compiled) -> int:  # type: ignore[no-untyped-def]
    return compiled.source_path.read_text().count("d->algorithm = SOL_DNNL_GROUPED")


def _check(g: Graph, compiled, batches: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    params = {name: t.data for name, t in g.params.items()}
    for batch in batches:
        inputs = [_f32(batch, *[int(s) for s in t.shape[1:]]) for t in g.inputs]
        got = compiled.run_numpy(inputs, params)
        expected = run_reference(g, inputs, params)
        for t, a, b in zip(g.outputs, got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=f"{t.name} at batch {batch}")


@pytest.mark.parametrize("channels,groups,kernel,stride,height,width", [
    (16, 16, (3, 3), 1, 13, 19),    # depthwise 3x3: 19 = 8 + 8 + 2 + 1 pixels, both borders
    (24, 24, (3, 3), 2, 15, 22),    # depthwise stride 2, odd input height
    (72, 72, (3, 3), 1, 6, 6),      # 72 channels: two tasks of channel blocks (64 + 8)
    (32, 32, (5, 5), 2, 17, 17),    # EfficientNet's 5x5 stride 2
    (16, 16, (7, 7), 1, 12, 12),    # ConvNeXt's 7x7, rows shorter than the kernel's reach on both sides
    (40, 40, (3, 3), 1, 7, 7),      # a 7x7 image: 7 rows split into channel slices for the threads
    (48, 48, (5, 5), 1, 14, 30),    # 5x5 stride 1: three steps of 8 inside pixels, 2 + 4 checked at the borders
    (64, 16, (3, 3), 1, 9, 11),     # groups of 4 (ResNeXt's first stage): permuted in registers
    (32, 8, (3, 3), 2, 10, 10),     # groups of 4 at stride 2: no compiled-in loop for it, the generic one
    (64, 8, (3, 3), 1, 9, 9),       # groups of 8 (RegNet): broadcast mode
    (64, 4, (3, 3), 2, 14, 14),     # groups of 16, stride 2
    (16, 16, (1, 3), 3, 7, 20),     # a shape with no compiled-in loop: the generic one
])
@pytest.mark.usefixtures("always_grouped")
def test_grouped_conv_matches_reference(channels: int, groups: int, kernel: tuple[int, int], stride: int,
                                        height: int, width: int) -> None:
    g = Graph(f"grouped_{channels}_{groups}_{kernel[0]}{kernel[1]}_{stride}_{height}_{width}")
    x = _image(g, "x", channels, height, width)
    (y,) = g.add_layer("relu", [_conv(g, x, "conv", channels, channels, groups, kernel, stride)], name="act")
    g.outputs = [y]
    compiled = compile_graph(g, "x86", passes=False)
    assert _grouped_calls(compiled) == 1
    _check(g, compiled, (1, 2))


@pytest.mark.usefixtures("always_grouped")
def test_grouped_post_ops_and_asymmetric_padding() -> None:
    """The shared epilogue (residual add, per-channel scale, clamp) after a depthwise conv padded (0, 2)."""
    g = Graph("grouped_post")
    x = _image(g, "x", 16, 10, 10)
    y = _conv(g, x, "dw", 16, 16, 16, (3, 3), padding=((0, 2), (0, 2)))
    (y,) = g.add_layer("add", [y, x], name="residual")
    (y,) = g.add_layer("mul", [y, g.add_param("scale", _f32(1, 16, 1, 1))], name="scale")
    (y,) = g.add_layer("clamp", [y], {"min": 0.0, "max": 6.0}, name="relu6")
    g.outputs = [y]
    compiled = compile_graph(g, "x86", passes=False)
    assert _grouped_calls(compiled) == 1
    _check(g, compiled, (1, 3))


@pytest.mark.usefixtures("always_grouped")
def test_convolutions_the_grouped_kernel_cannot_run_stay_with_onednn() -> None:
    """Groups of 3 channels, 12 output channels (not a multiple of 8), a sigmoid post-op, an ungrouped conv."""
    g = Graph("grouped_not")
    x = _image(g, "x", 24, 8, 8)
    y = _conv(g, x, "groups_of_3", 24, 24, 8, (3, 3))
    y = _conv(g, y, "twelve", 24, 12, 12, (3, 3))
    (y,) = g.add_layer("sigmoid", [_conv(g, y, "sigmoid_after", 12, 12, 12, (3, 3))], name="sig")
    y = _conv(g, y, "dense", 12, 16, 1, (3, 3))
    g.outputs = [y]
    compiled = compile_graph(g, "x86", passes=False)
    assert _grouped_calls(compiled) == 0
    _check(g, compiled, (1,))


def test_config_switches_the_grouped_kernel_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sol.config, "autotuning", False)
    monkeypatch.setitem(sol.config, "x86::grouped", False)
    g = Graph("grouped_off")
    x = _image(g, "x", 64, 14, 14)
    g.outputs = [_conv(g, x, "g16", 64, 64, 16, (3, 3))]
    assert grouped.heuristic(grouped.shape_of(g.layers[0])) is True  # type: ignore[arg-type]  # chosen otherwise
    assert _grouped_calls(compile_graph(g, "x86", passes=False)) == 0


def test_heuristic_follows_the_measurements() -> None:
    shape = lambda c, groups, k: (1, 28, 28, c, c, groups, k, k, 1, 1, k // 2, k // 2, k // 2, k // 2)  # noqa: E731
    assert grouped.heuristic(shape(128, 32, 3))        # 4 per group: oneDNN's im2col+GEMM, 8x slower
    assert grouped.heuristic(shape(256, 32, 3))        # 8 per group
    assert not grouped.heuristic(shape(1024, 32, 3))   # 32 per group: oneDNN's GEMM is fast enough
    assert not grouped.heuristic(shape(144, 144, 3))   # depthwise 3x3: oneDNN's kernel is faster
    assert grouped.heuristic(shape(96, 96, 7))         # depthwise 7x7


def test_autotuning_times_the_kernel_against_onednn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both algorithms run the shape (positive times), and the faster one is chosen, by a margin."""
    tuner = X86Flavour().dnn.tuner  # type: ignore[union-attr]
    assert tuner is not None
    shape = (1, 14, 14, 64, 64, 16, 3, 3, 1, 1, 1, 1, 1, 1)
    timings = tuner.timings(shape, (0, grouped.GROUPED))
    assert all(seconds > 0 for seconds in timings.values()), timings
    g = Graph("grouped_tuned")
    x = _image(g, "x", 64, 28, 28)
    g.outputs = [_conv(g, x, "g16", 64, 64, 16, (3, 3))]
    layer = g.layers[0]
    assert grouped.worth_timing(grouped.shape_of(layer))  # type: ignore[arg-type]  # 28x28x64 outputs x 4 x 9: 3.6 MFLOP
    assert not grouped.worth_timing((1, 7, 7, 64, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1))  # depthwise 7x7x64: microseconds
    monkeypatch.setitem(sol.config, "autotuning", True)
    for sol_seconds, chosen in ((0.5e-3, True), (1.01e-3 * tuning.MARGIN, False)):  # faster, not by the margin
        monkeypatch.setattr(tuner, "timings", lambda shape, algorithms, kind="conv", s=sol_seconds: {0: 1e-3, grouped.GROUPED: s})
        assert grouped.choose(layer, [], tuner) is chosen
