"""Linear layers on MKL's packed GEMM (SOL_DNNL_LINEAR_BLAS, glue/sol_blas.cpp, mkl.py, linear.py).

The choice is timed; these tests force it and compare with the numpy reference: bias and every post-op the
glue's epilogue computes, binary operands of every broadcast, batch sizes other than the creation batch (the
packed weights serve any number of rows), and sizes whose columns split unevenly between the threads.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import sol
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference
from sol_backend_x86 import linear, mkl, tuning
from sol_backend_x86.cpuinfo import host_has_avx512
from sol_backend_x86.flavour import X86Flavour, onednn_paths

pytestmark = [pytest.mark.skipif(onednn_paths() is None, reason="oneDNN (onednn-devel-cpu-gomp) is not installed"),
              pytest.mark.skipif(mkl.library() is None, reason="MKL (the `mkl` wheel) is not installed")]

RNG = np.random.default_rng(11)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _block(features: int, hidden: int) -> Graph:
    """Linears with every post-op kind the MKL Linear computes, over [N, 5, features] rows."""
    g = Graph("mkl_linear")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(5, Purpose.S), Dim(features, Purpose.C)])

    def fc(name: str, value, cin: int, cout: int, bias: bool = True):  # noqa: ANN001, ANN202 - test helper
        inputs = [value, g.add_param(f"{name}.weight", _f32(cout, cin, scale=cin ** -0.5))]
        if bias:
            inputs.append(g.add_param(f"{name}.bias", _f32(cout)))
        return g.add_layer("linear", inputs, name=name)[0]

    (h,) = g.add_layer("gelu", [fc("fc1", x, features, hidden)], name="gelu_erf")
    (h,) = g.add_layer("gelu", [fc("fc2", h, hidden, hidden)], {"approximate": "tanh"}, name="gelu_tanh")
    (y,) = g.add_layer("add", [fc("fc3", h, hidden, features), x], name="residual")  # [N, 5, F] operand
    (y,) = g.add_layer("leaky_relu", [fc("fc4", y, features, hidden, bias=False)], {"negative_slope": 0.1},
                       name="leaky")
    (y,) = g.add_layer("mul", [y, g.add_param("scale", _f32(hidden))], name="scale")  # per column
    (y,) = g.add_layer("sub", [y, g.add_param("shift", np.full((1,), 0.5, np.float32))], name="shift")  # scalar
    (y,) = g.add_layer("clamp", [fc("fc5", y, hidden, features)], {"min": -1.0, "max": 1.5}, name="clamp")
    (y,) = g.add_layer("relu", [fc("fc6", y, features, hidden)], name="relu")
    g.outputs = [y]
    return g


@pytest.mark.parametrize(("features", "hidden"), [(24, 40), (64, 200)])
def test_mkl_linear_matches_reference(monkeypatch: pytest.MonkeyPatch, features: int, hidden: int) -> None:
    monkeypatch.setattr(linear, "choose", lambda layer, post_ops, tuner, reduced=False: linear.LINEAR_BLAS)
    g = _block(features, hidden)
    compiled = compile_graph(g, "x86", passes=False)
    assert compiled.source_path.read_text().count("d->algorithm = SOL_DNNL_LINEAR_BLAS") == 6
    needed = subprocess.run(["readelf", "-d", str(compiled.library.path)], capture_output=True, text=True).stdout
    assert mkl.library().name in needed  # linked: the weak MKL symbols resolve, the glue runs MKL's kernel
    params = {name: t.data for name, t in g.params.items()}
    for batch in (1, 3, 16):  # compiled at batch 1; 80 rows with 16
        inputs = [_f32(batch, 5, features)]
        np.testing.assert_allclose(compiled.run_numpy(inputs, params)[0], run_reference(g, inputs, params)[0],
                                   rtol=1e-4, atol=1e-5, err_msg=f"batch {batch}")


def test_mkl_kernel_runs_where_linked() -> None:
    """The tuning library links MKL: its timing of LINEAR_BLAS ran MKL's kernel (a fallback to oneDNN would be
    reported as -1, not timed), also for widths no thread count divides."""
    tuner = X86Flavour().dnn.tuner  # type: ignore[union-attr]
    assert tuner is not None and tuner.blas == mkl.library()
    for shape in ((7, 24, 16), (3, 33, 200)):
        timings = tuner.timings(shape, (tuning.DIRECT, linear.LINEAR_BLAS), kind="linear")
        assert all(seconds > 0 for seconds in timings.values()), (shape, timings)


def test_mkl_is_a_candidate_only_where_it_computes_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    tuner = X86Flavour().dnn.tuner  # type: ignore[union-attr]
    g = Graph("linear_big")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(128, Purpose.S), Dim(768, Purpose.C)])
    (h,) = g.add_layer("linear", [x, g.add_param("fc.weight", _f32(768, 768))], name="fc")
    g.add_layer("sigmoid", [h], name="act")
    g.add_layer("gelu", [h], name="gelu")
    layer, sigmoid, gelu = g.layers
    monkeypatch.setitem(sol.config, "autotuning", True)
    monkeypatch.setattr(tuner, "timings", lambda shape, algorithms, kind: {0: 1e-3, 4: 1e-3, 5: 0.5e-3})
    assert linear.choose(layer, [], tuner) == linear.LINEAR_BLAS
    assert linear.choose(layer, [gelu], tuner) == (linear.LINEAR_BLAS if host_has_avx512() else linear.DIRECT)
    assert linear.choose(layer, [sigmoid], tuner) == linear.DIRECT  # the epilogue has no sigmoid
    # bf16 calls stay with oneDNN: its matmul, or with that off the timed choice without MKL's fp32 GEMM
    assert linear.choose(layer, [], tuner, reduced=True) == linear.LINEAR_MATMUL
    monkeypatch.setitem(sol.config, linear.LINEAR_MATMUL_KEY.name, False)
    assert linear.choose(layer, [], tuner, reduced=True) == linear.DIRECT
    monkeypatch.setattr(tuner, "blas", None)  # not installed, x86::mkl off, or a deployed library
    assert linear.choose(layer, [], tuner) == linear.DIRECT


def test_x86_mkl_off_and_deployed_libraries_do_without_mkl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sol.config, mkl.MKL_KEY.name, False)
    assert mkl.library() is None and X86Flavour().blas is None
    monkeypatch.setitem(sol.config, mkl.MKL_KEY.name, True)
    assert X86Flavour(blas=False).blas is None and X86Flavour().blas == mkl.library()
    assert mkl.link_flags(None) == []
