"""SOL's Winograd F(4x4, 3x3) and F(2x2, 3x3) convolutions (glue/sol_winograd.cpp) and how layers are chosen.

Winograd's float32 result differs from a direct convolution by rounding that
scales with the magnitude of the products, not of the result; so each output
is checked against the numpy reference to 1e-5 of sum(|w| |x|) + |b| there (the
same graph run on absolute values), which is ~5x the error measured on
resnet-sized layers and far below any real mistake (a wrong tap, tile or
channel is off by whole products).
"""

from __future__ import annotations

import numpy as np
import pytest
import sol
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose, Tensor
from sol.ir.interpret import run_reference
from sol_backend_x86 import winograd
from sol_backend_x86.flavour import X86Flavour, onednn_paths
from sol_backend_x86.tuning import WINOGRAD_BLOCKS as BLOCKS
from sol_backend_x86.tuning import WINOGRAD_PHASES as PHASES

pytestmark = [pytest.mark.skipif(onednn_paths() is None, reason="oneDNN (onednn-devel-cpu-gomp) is not installed")]

RNG = np.random.default_rng(7)
RELATIVE = 1e-5


@pytest.fixture(params=[winograd.WINOGRAD_4X4, winograd.WINOGRAD_2X2], ids=["F4x4", "F2x2"])
def always_winograd(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every eligible conv runs as Winograd (each tile size in turn), whatever its size (no timing)."""
    monkeypatch.setitem(sol.config, "autotuning", False)
    monkeypatch.setattr(winograd, "worth_timing", lambda shape: True)
    monkeypatch.setattr(winograd, "heuristic", lambda shape, allowed: request.param)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _image(g: Graph, name: str, channels: int, size: int) -> Tensor:
    return g.add_input(name, [Dim(BATCH, Purpose.N), Dim(channels, Purpose.C), Dim(size, Purpose.P),
                              Dim(size, Purpose.P)])


def _conv(g: Graph, x: Tensor, name: str, cin: int, cout: int, padding: int = 1, stride: int = 1) -> Tensor:
    w = g.add_param(f"{name}.weight", _f32(cout, cin, 3, 3, scale=1 / (3 * cin ** 0.5)))
    b = g.add_param(f"{name}.bias", _f32(cout))
    attrs = {"stride": (stride, stride), "padding": ((padding, padding),) * 2, "dilation": (1, 1), "groups": 1}
    (y,) = g.add_layer("conv", [x, w, b], attrs, name=name)
    return y


def _compile(g: Graph):  # type: ignore[no-untyped-def]
    return compile_graph(g, "x86", passes=False)


def _algorithms(compiled) -> int:  # type: ignore[no-untyped-def]
    """How many library calls the generated code runs as Winograd (either tile size)."""
    return compiled.source_path.read_text().count("d->algorithm = SOL_DNNL_WINOGRAD")


def _check(g: Graph, compiled, batches: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    params = {name: t.data for name, t in g.params.items()}
    for batch in batches:
        inputs = [_f32(batch, *[int(s) for s in t.shape[1:]]) for t in g.inputs]
        got = compiled.run_numpy(inputs, params)
        expected = run_reference(g, inputs, params)
        magnitude = run_reference(g, [np.abs(x) for x in inputs], {k: np.abs(v) for k, v in params.items()})
        for t, a, b, m in zip(g.outputs, got, expected, magnitude, strict=True):
            bound = RELATIVE * m + 1e-6
            worst = float(np.max(np.abs(a - b) - bound))
            assert worst <= 0, f"{t.name} at batch {batch}: off by {worst:.3g} beyond the bound"


@pytest.mark.parametrize("cin,cout,size,padding,batches", [
    (16, 32, 14, 1, (1, 3)),   # whole tiles, a 16-wide and no 8-wide output block
    (13, 24, 11, 0, (2,)),     # input channels not a multiple of 8, 16+8 output blocks, partial edge tiles
    (8, 8, 9, 2, (1,)),        # padding wider than the kernel's reach: whole zero tiles at the border
    (32, 64, 40, 1, (4,)),     # 400 tiles: several blocks per thread (small transformed weights)
    (96, 104, 30, 1, (3,)),    # transformed weights over 512 KiB: the three phases, over several chunks of tiles
    (24, 72, 10, 1, (1,)),     # AVX-512: a 64-wide block and an 8-wide one (masked)
    (16, 40, 12, 1, (2,)),     # AVX-512: one block of 16 + 16 + 8 (the last masked)
])
@pytest.mark.usefixtures("always_winograd")
def test_winograd_conv_matches_reference(cin: int, cout: int, size: int, padding: int,
                                         batches: tuple[int, ...]) -> None:
    g = Graph(f"wino_{cin}_{cout}_{size}_{padding}")
    x = _image(g, "x", cin, size)
    (y,) = g.add_layer("relu", [_conv(g, x, "conv", cin, cout, padding)], name="act")
    g.outputs = [y]
    compiled = _compile(g)
    assert _algorithms(compiled) == 1
    _check(g, compiled, batches)


@pytest.mark.parametrize("cin,cout,size,schedule", [
    (32, 64, 40, PHASES),   # small transformed weights (per-thread blocks by their size), through the phases
    (96, 104, 30, BLOCKS),  # over 512 KiB (the phases by their size), in per-thread blocks
], ids=["phases", "blocks"])
def test_each_schedule_computes_the_convolution(monkeypatch: pytest.MonkeyPatch, cin: int, cout: int, size: int,
                                                schedule: int) -> None:
    """The autotuner may pick either way of sharing the work between the threads, whatever the weights' size."""
    monkeypatch.setitem(sol.config, "autotuning", False)
    monkeypatch.setattr(winograd, "worth_timing", lambda shape: True)
    monkeypatch.setattr(winograd, "heuristic", lambda shape, allowed: winograd.WINOGRAD_2X2 | schedule)
    g = Graph(f"wino_schedule_{schedule}")
    x = _image(g, "x", cin, size)
    y = _conv(g, x, "conv", cin, cout)
    (y,) = g.add_layer("add", [y, _image(g, "residual", cout, size)], name="residual")
    (y,) = g.add_layer("relu", [y], name="act")
    g.outputs = [y]
    compiled = _compile(g)
    expected = f"d->algorithm = {winograd.c_expression(winograd.WINOGRAD_2X2 | schedule)};"
    assert "SOL_DNNL_WINOGRAD_2X2 | SOL_DNNL_WINOGRAD_" in expected
    assert compiled.source_path.read_text().count(expected) == 1
    _check(g, compiled, (1, 2))


def test_schedule_timing_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """x86::winograd_schedule off: each tile size is timed once, and the glue picks the schedule by the weights' size."""
    tuner = X86Flavour().dnn.tuner  # type: ignore[union-attr]
    assert tuner is not None
    timed: list[tuple[int, ...]] = []

    def record(shape: tuple[int, ...], algorithms: tuple[int, ...], kind: str = "conv") -> dict[int, float]:
        timed.append(algorithms)
        return {a: 1e-3 if a else 2e-3 for a in algorithms}

    monkeypatch.setattr(tuner, "_time_all", record)
    monkeypatch.setitem(sol.config, "x86::winograd_schedule", False)
    shape = (1, 24, 24, 32, 32, 1, 1, 1, 1)
    assert winograd.fastest(tuner, shape, winograd.candidates()) == winograd.WINOGRAD_2X2
    assert timed == [(winograd.DIRECT, winograd.WINOGRAD_2X2)]
    assert "schedule 0" in winograd.settings()  # part of the generated code's cache key


@pytest.mark.usefixtures("always_winograd")
def test_winograd_post_ops_residual_channel_and_scalar_operands() -> None:
    """The epilogue: residual add (full), per-channel scale, clamp, leaky relu, scalar subtract, in order."""
    g = Graph("wino_post")
    x = _image(g, "x", 16, 12)
    (a,) = g.add_layer("relu", [_conv(g, x, "conv1", 16, 16)], name="relu1")
    y = _conv(g, a, "conv2", 16, 16)
    (y,) = g.add_layer("add", [y, a], name="residual")
    (y,) = g.add_layer("mul", [y, g.add_param("scale", _f32(1, 16, 1, 1))], name="scale")
    (y,) = g.add_layer("clamp", [y], {"min": -1.0, "max": 6.0}, name="clamp")
    (y,) = g.add_layer("leaky_relu", [y], {"negative_slope": 0.1}, name="leaky")
    (y,) = g.add_layer("sub", [y, g.add_param("shift", np.full((1,), 0.25, np.float32))], name="shift")
    g.outputs = [y]
    compiled = _compile(g)
    titles = [t for t in compiled.metadata["clusters"] if t.startswith("DNN ")]
    assert titles[1] == ("DNN conv2 (conv) -> residual (add) -> scale (mul) -> clamp (clamp) -> leaky (leaky_relu)"
                         " -> shift (sub)")
    assert _algorithms(compiled) == 2
    _check(g, compiled, (1, 2))


@pytest.mark.usefixtures("always_winograd")
def test_convolutions_winograd_cannot_run_stay_with_onednn() -> None:
    """Stride 2, output channels not a multiple of 8, or a post-op outside the epilogue's (sigmoid)."""
    g = Graph("wino_not")
    x = _image(g, "x", 8, 12)
    y = _conv(g, x, "strided", 8, 16, stride=2)
    y = _conv(g, y, "odd", 16, 12)
    (y,) = g.add_layer("sigmoid", [_conv(g, y, "sigmoid_after", 12, 16)], name="sig")
    g.outputs = [y]
    compiled = _compile(g)
    assert _algorithms(compiled) == 0
    _check(g, compiled, (1,))


@pytest.mark.usefixtures("always_winograd")
def test_winograd_weights_are_transformed_again_when_parameters_change() -> None:
    g = Graph("wino_repack")
    x = _image(g, "x", 16, 8)
    g.outputs = [_conv(g, x, "conv", 16, 16)]
    compiled = _compile(g)
    assert _algorithms(compiled) == 1
    inputs = [_f32(1, 16, 8, 8)]
    for _ in range(2):
        params = {name: _f32(*t.data.shape) for name, t in g.params.items()}  # type: ignore[union-attr]
        np.testing.assert_allclose(compiled.run_numpy(inputs, params)[0], run_reference(g, inputs, params)[0],
                                   rtol=1e-4, atol=1e-4)


def test_config_switches_winograd_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sol.config, "autotuning", False)
    monkeypatch.setitem(sol.config, "x86::winograd", False)
    g = Graph("wino_off")
    x = _image(g, "x", 64, 56)
    g.outputs = [_conv(g, x, "conv", 64, 64)]
    assert winograd.heuristic((1, 56, 56, 64, 64, 1, 1, 1, 1)) != winograd.DIRECT  # it would be chosen otherwise
    assert _algorithms(_compile(g)) == 0


def test_heuristic_follows_the_measurements() -> None:
    # resnet18 layer1-3: faster measured; layer4 3x slower as F(4x4); too few input channels
    default = winograd.candidates()
    assert winograd.heuristic((1, 56, 56, 64, 64, 1, 1, 1, 1), default) == winograd.WINOGRAD_2X2
    assert winograd.heuristic((1, 14, 14, 256, 256, 1, 1, 1, 1), default) == winograd.WINOGRAD_2X2
    assert winograd.heuristic((1, 56, 56, 64, 64, 1, 1, 1, 1), frozenset(winograd.NAMES)) == winograd.WINOGRAD_4X4
    for allowed in (default, frozenset(winograd.NAMES)):
        assert winograd.heuristic((1, 7, 7, 512, 512, 1, 1, 1, 1), allowed) == winograd.DIRECT
        assert winograd.heuristic((1, 56, 56, 8, 64, 1, 1, 1, 1), allowed) == winograd.DIRECT
    assert not winograd.worth_timing((1, 12, 12, 16, 16, 1, 1, 1, 1))  # 9 tiles: microseconds either way
    assert not winograd.worth_timing((1, 56, 56, 128, 32, 1, 1, 1, 1))  # thin output: slower in models
    assert winograd.worth_timing((1, 56, 56, 64, 64, 1, 1, 1, 1))


@pytest.mark.parametrize("isa,thin_input_timed", [("avx512", True), ("avx2", False)])
def test_thin_input_layers_are_candidates_only_with_the_avx512_gemm(monkeypatch: pytest.MonkeyPatch, isa: str,
                                                                    thin_input_timed: bool) -> None:
    monkeypatch.setattr(winograd, "gemm_isa", lambda: isa)
    squeezenet_expand = (1, 27, 27, 32, 128, 1, 1, 1, 1)  # 32 -> 128 channels
    assert winograd.worth_timing(squeezenet_expand) == thin_input_timed
    assert not winograd.worth_timing((1, 27, 27, 8, 128, 1, 1, 1, 1))  # below both limits
    assert f"from {winograd.MIN_INPUT_CHANNELS[isa]}x" in winograd.settings()  # part of the code's cache key


def test_winograd_4x4_is_a_candidate_only_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """F(4x4)'s float32 error is several times a direct convolution's: never chosen by default, even if fastest."""
    assert winograd.WINOGRAD_4X4 not in winograd.candidates()
    tuner = X86Flavour().dnn.tuner  # type: ignore[union-attr]
    assert tuner is not None
    seconds = {winograd.DIRECT: 3e-3, winograd.WINOGRAD_4X4 | BLOCKS: 1e-3, winograd.WINOGRAD_4X4 | PHASES: 1.1e-3,
               winograd.WINOGRAD_2X2 | BLOCKS: 2e-3, winograd.WINOGRAD_2X2 | PHASES: 2.1e-3}
    monkeypatch.setattr(tuner, "_time_all", lambda shape, algorithms, kind="conv": {a: seconds[a] for a in algorithms})
    shape = (1, 24, 24, 32, 32, 1, 1, 1, 1)
    assert winograd.fastest(tuner, shape, winograd.candidates()) == winograd.WINOGRAD_2X2 | BLOCKS
    monkeypatch.setitem(sol.config, "x86::winograd_4x4", True)
    assert winograd.fastest(tuner, shape, winograd.candidates()) == winograd.WINOGRAD_4X4 | BLOCKS


def _max_error_against_float64(algorithm: int, monkeypatch: pytest.MonkeyPatch) -> float:
    """Max |error| of a 64->64 channel 3x3 conv on 28x28 run by ``algorithm``, against a float64 reference."""
    monkeypatch.setitem(sol.config, "autotuning", False)
    monkeypatch.setattr(winograd, "heuristic", lambda shape, allowed: algorithm)
    rng = np.random.default_rng(3)
    g = Graph(f"wino_accuracy_{algorithm}")
    x = _image(g, "x", 64, 28)
    g.outputs = [_conv(g, x, "conv", 64, 64)]
    compiled = _compile(g)
    assert _algorithms(compiled) == (algorithm != winograd.DIRECT)
    params = {name: t.data for name, t in g.params.items()}
    image = rng.standard_normal((1, 64, 28, 28)).astype(np.float32)
    got = compiled.run_numpy([image], params)[0].astype(np.float64)
    exact = run_reference(g, [image.astype(np.float64)], {k: v.astype(np.float64) for k, v in params.items()})[0]
    return float(np.max(np.abs(got - exact)))


def test_winograd_2x2_is_as_accurate_as_a_direct_convolution(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why F(2x2) is on by default and F(4x4) is not (measured here: 0.5x and ~6x oneDNN's max error)."""
    direct = _max_error_against_float64(winograd.DIRECT, monkeypatch)
    assert _max_error_against_float64(winograd.WINOGRAD_2X2, monkeypatch) <= 1.5 * direct
    assert _max_error_against_float64(winograd.WINOGRAD_4X4, monkeypatch) > 2 * direct


def test_autotuning_times_both_kernels_once_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    flavour = X86Flavour()
    tuner = flavour.dnn.tuner  # type: ignore[union-attr]
    assert tuner is not None
    timed: list[dict[int, float]] = []
    original = tuner._time_all

    def counting(shape: tuple[int, ...], algorithms: tuple[int, ...], kind: str = "conv") -> dict[int, float]:
        timed.append(original(shape, algorithms, kind))
        return timed[-1]

    monkeypatch.setattr(tuner, "_time_all", counting)
    shape = (1, 20, 20, 16, 32, 1, 1, 1, 1)
    first = winograd.fastest(tuner, shape)
    # oneDNN, and each tile size with each way of sharing the work between the threads
    assert len(timed) == 1 and sorted(timed[0]) == sorted([winograd.DIRECT, *(
        tiles | schedule for tiles in (winograd.WINOGRAD_4X4, winograd.WINOGRAD_2X2) for schedule in (BLOCKS, PHASES))])
    assert all(seconds > 0 for seconds in timed[0].values()), f"an algorithm could not run {shape}: {timed[0]}"
    assert winograd.fastest(tuner, shape) == first  # the cached choice: no second timing
    assert len(timed) == 1
    # an algorithm that cannot run the shape (output channels not a multiple of 8) reports a negative time
    assert original((1, 20, 20, 16, 12, 1, 3, 3, 1, 1, 1, 1, 1, 1), (0, 2))[winograd.WINOGRAD_2X2] < 0
