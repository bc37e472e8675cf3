"""Linear layers run as oneDNN's 1x1 convolution (SOL_DNNL_LINEAR_1X1, linear.py) where that was timed faster.

The glue rewrites the inner product's descriptor into a convolution over a
rows x 1 channels-last image; these tests force that rewrite and compare with
the numpy reference, post-ops and the wildcard batch included.
"""

from __future__ import annotations

import numpy as np
import pytest
import sol
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference
from sol_backend_x86 import linear, tuning, winograd
from sol_backend_x86.flavour import X86Flavour, onednn_paths

pytestmark = [pytest.mark.skipif(onednn_paths() is None, reason="oneDNN (onednn-devel-cpu-gomp) is not installed")]

RNG = np.random.default_rng(5)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _encoder_block() -> Graph:
    """linear -> gelu -> residual add, linear -> per-channel scale -> scalar subtract, over [N, 7, 24] rows."""
    g = Graph("linear_1x1")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(7, Purpose.S), Dim(24, Purpose.C)])
    (h,) = g.add_layer("linear", [x, g.add_param("fc1.weight", _f32(24, 24, scale=0.2)),
                                  g.add_param("fc1.bias", _f32(24))], name="fc1")
    (h,) = g.add_layer("gelu", [h], name="gelu")
    (h,) = g.add_layer("add", [h, x], name="residual")
    (y,) = g.add_layer("linear", [h, g.add_param("fc2.weight", _f32(16, 24, scale=0.2))], name="fc2")
    (y,) = g.add_layer("mul", [y, g.add_param("scale", _f32(16))], name="scale")
    (y,) = g.add_layer("sub", [y, g.add_param("shift", np.full((1,), 0.5, np.float32))], name="shift")
    g.outputs = [y]
    return g


def test_linear_as_1x1_convolution_matches_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linear, "choose", lambda layer, post_ops, tuner, reduced=False: linear.LINEAR_1X1)
    g = _encoder_block()
    compiled = compile_graph(g, "x86", passes=False)
    assert compiled.source_path.read_text().count("d->algorithm = SOL_DNNL_LINEAR_1X1") == 2
    params = {name: t.data for name, t in g.params.items()}
    for batch in (1, 3):
        inputs = [_f32(batch, 7, 24)]
        np.testing.assert_allclose(compiled.run_numpy(inputs, params)[0], run_reference(g, inputs, params)[0],
                                   rtol=1e-4, atol=1e-5, err_msg=f"batch {batch}")


def test_linear_runs_as_convolution_only_where_timed_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    tuner = X86Flavour().dnn.tuner  # type: ignore[union-attr]
    assert tuner is not None
    timings = tuner.timings((7, 24, 16), (winograd.DIRECT, linear.LINEAR_1X1), kind="linear")
    assert all(seconds > 0 for seconds in timings.values()), timings  # both ran the shape
    layer = _encoder_block().layers[0]
    assert linear.shape_of(layer) == (7, 24, 24)
    monkeypatch.setitem(sol.config, "autotuning", True)
    monkeypatch.setattr(tuner, "timings", lambda shape, algorithms, kind: {0: 1e-3, 4: 0.5e-3})
    assert linear.choose(layer, [], tuner) == linear.DIRECT  # 8 KFLOP: not worth a timing, the inner product stays
    big = Graph("linear_big")  # as big as the encoder's layers: timed
    x = big.add_input("x", [Dim(BATCH, Purpose.N), Dim(128, Purpose.S), Dim(768, Purpose.C)])
    big.add_layer("linear", [x, big.add_param("fc.weight", _f32(768, 768))], name="fc")
    layer = big.layers[0]
    monkeypatch.setattr(tuner, "blas", None)  # the choice between oneDNN's two kernels (MKL: test_mkl_linear.py)
    for conv_seconds, chosen in ((0.5e-3, linear.LINEAR_1X1), (1.01e-3 * tuning.MARGIN, linear.DIRECT)):
        monkeypatch.setattr(tuner, "timings", lambda shape, algorithms, kind, s=conv_seconds: {0: 1e-3, 4: s})
        assert linear.choose(layer, [], tuner) == chosen
    monkeypatch.setitem(sol.config, "autotuning", False)  # untimed: the inner product stays
    assert linear.choose(layer, [], tuner) == linear.DIRECT


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_linear_as_matmul_matches_reference(monkeypatch: pytest.MonkeyPatch, precision: str) -> None:
    """SOL_DNNL_LINEAR_MATMUL: oneDNN's matmul of the rows by the transposed weights, bias and post-ops as they are."""
    from sol_backend_x86 import precision as x86_precision

    if precision == "bf16" and not x86_precision.native_bf16():
        pytest.skip("no native bf16 on this CPU")
    monkeypatch.setattr(linear, "choose", lambda layer, post_ops, tuner, reduced=False: linear.LINEAR_MATMUL)
    g = _encoder_block()
    g.name = "linear_matmul"  # another artifact than the 1x1 test's (the forced choice is no part of the cache key)
    compiled = compile_graph(g, "x86", passes=False, precision=precision)
    assert compiled.source_path.read_text().count("d->algorithm = SOL_DNNL_LINEAR_MATMUL") == 2
    params = {name: t.data for name, t in g.params.items()}
    bound = 2e-2 if precision == "bf16" else 1e-5
    for batch in (1, 3):
        inputs = [_f32(batch, 7, 24)]
        got, want = compiled.run_numpy(inputs, params)[0], run_reference(g, inputs, params)[0]
        assert np.abs(got - want).max() <= bound * np.abs(want).max(), f"batch {batch}"


def test_bf16_linears_run_as_the_matmul_and_are_timed_in_bf16_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    tuner = X86Flavour().dnn.tuner  # type: ignore[union-attr]
    assert tuner is not None
    asked: list[tuple[tuple[int, ...], str]] = []

    def timings(shape: tuple[int, ...], algorithms: tuple[int, ...], kind: str) -> dict[int, float]:
        asked.append((algorithms, kind))
        return {0: 1e-3, linear.LINEAR_1X1: 0.9e-3, linear.LINEAR_MATMUL: 0.5e-3}

    big = Graph("linear_big_bf16")
    x = big.add_input("x", [Dim(BATCH, Purpose.N), Dim(197, Purpose.S), Dim(768, Purpose.C)])
    big.add_layer("linear", [x, big.add_param("fc.weight", _f32(768, 768))], name="fc")
    layer = big.layers[0]
    monkeypatch.setattr(tuner, "timings", timings)
    for autotuning in (True, False):  # untimed: the same choice either way
        monkeypatch.setitem(sol.config, "autotuning", autotuning)
        assert linear.choose(layer, [], tuner, reduced=True) == linear.LINEAR_MATMUL
    assert asked == []
    monkeypatch.setitem(sol.config, "autotuning", True)
    monkeypatch.setitem(sol.config, linear.LINEAR_MATMUL_KEY.name, False)
    assert linear.choose(layer, [], tuner, reduced=True) == linear.LINEAR_1X1
    assert asked == [((0, linear.LINEAR_1X1), "linear bf16")]
    # fp32 keeps its candidates and timings: the matmul is none of them
    monkeypatch.setattr(tuner, "blas", None)
    asked.clear()
    assert linear.choose(layer, [], tuner) == linear.LINEAR_1X1
    assert asked == [((0, linear.LINEAR_1X1), "linear")]
