"""bf16 on x86 (sol.precision): the capability check, and Conv/Linear/MatMul through oneDNN in bf16.

Each graph is compiled with precision="bf16" and compared with SOL's numpy reference computed in float64:
the relative error (max |y - exact| / max |exact|) must be that of bf16 operands with fp32 accumulation
(at most 2e-2, the bound issue 33 sets for whole models; a softmax of bf16 logits reaches 1.6e-2) and above fp32's (which would be ~1e-6: the check that bf16 really ran). Outputs keep float32.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import sol
from sol.compiler import compile_graph
from sol.errors import SolUnsupportedError
from sol.ir import BATCH, Dim, Graph, Purpose, Tensor
from sol.ir.interpret import run_reference
from sol_backend_x86 import precision
from sol_backend_x86.flavour import X86Flavour, onednn_paths

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
import _graph_builders as builders  # noqa: E402

RNG = np.random.default_rng(7)
CONV = {"stride": (1, 1), "dilation": (1, 1), "groups": 1}
BF16_BOUND = 2e-2  # bf16 keeps 8 significant bits: 2^-9 relative per operand, accumulated in fp32
FP32_ABOVE = 1e-5  # an fp32 run of these graphs stays near 1e-6

needs_bf16 = pytest.mark.skipif(
    onednn_paths() is None or not precision.native_bf16(),
    reason="needs oneDNN and a CPU with native bf16 (amx_bf16 or avx512_bf16 in /proc/cpuinfo)")


def test_missing_names_the_cpu_flags_and_onednn() -> None:
    assert precision.missing("fp32", False, frozenset()) is None
    assert "amx_bf16" in precision.missing("bf16", True, frozenset({"avx2", "avx512f"}))
    assert "oneDNN" in precision.missing("bf16", False, frozenset({"amx_bf16"}))
    assert precision.missing("bf16", True, frozenset({"avx512_bf16"})) is None
    assert "no fp16 kernels" in precision.missing("fp16", True, frozenset({"avx512_fp16", "amx_bf16"}))


def test_fp16_raises_a_sol_error_naming_it() -> None:
    g = Graph("fp16_refused")
    x = g.add_input("x", [Dim(2, Purpose.N), Dim(3)])
    (y,) = g.add_layer("relu", [x], name="act")
    g.outputs = [y]
    with pytest.raises(SolUnsupportedError, match="precision='fp16' cannot run on x86.*no fp16 kernels"):
        compile_graph(g, "x86", passes=False, precision="fp16")


def test_auto_is_bf16_exactly_where_the_cpu_has_it() -> None:
    flavour = X86Flavour()
    expected = "bf16" if precision.native_bf16() and flavour.dnn is not None else "fp32"
    assert flavour.native_precision() == expected


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return builders.f32(RNG, *shape, scale=scale)


def _conv(g: Graph, x: Tensor, name: str, cin: int, cout: int, k: int = 3, groups: int = 1, stride: int = 1) -> Tensor:
    return builders.conv(RNG, g, x, name, cin, cout, k, groups, stride)


def _params(g: Graph) -> dict[str, np.ndarray]:
    return {name: t.data for name, t in g.params.items()}  # type: ignore[misc]


def _relative_errors(g: Graph, compiled, batch: int, params: dict[str, np.ndarray]) -> list[float]:  # type: ignore[no-untyped-def]
    inputs = [_f32(batch, *[int(s) for s in t.shape[1:]]) for t in g.inputs]
    got = compiled.run_numpy(inputs, params)
    exact = run_reference(g, [i.astype(np.float64) for i in inputs], {k: v.astype(np.float64) for k, v in params.items()})
    errors = []
    for a, b in zip(got, exact, strict=True):
        assert a.dtype == np.float32  # outputs keep the graph's dtype
        errors.append(float(np.abs(a - b).max() / np.abs(b).max()))
    return errors


def _check_bf16(g: Graph, batches: tuple[int, ...] = (1, 3)) -> None:
    compiled = compile_graph(g, "x86", passes=False, precision="bf16")
    assert compiled.precision == "bf16"
    for batch in batches:
        for error in _relative_errors(g, compiled, batch, _params(g)):
            assert FP32_ABOVE < error <= BF16_BOUND, f"{g.name} at batch {batch}: relative error {error:.2e}"


@needs_bf16
def test_convolutions_with_post_ops_in_bf16() -> None:
    g = Graph("bf16_convs")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(16, Purpose.C), Dim(12, Purpose.P), Dim(12, Purpose.P)])
    (y,) = g.add_layer("relu", [_conv(g, x, "conv1", 16, 32)], name="relu1")
    y = _conv(g, y, "conv2", 32, 16)
    (y,) = g.add_layer("add", [y, x], name="residual")  # a binary post-op read in fp32
    y = _conv(g, y, "down", 16, 32, stride=2)
    y = _conv(g, y, "dw", 32, 32, groups=32)
    w = g.add_param("up.weight", _f32(32, 8, 3, 3, scale=0.3))
    attrs = {"stride": (2, 2), "padding": (1, 1), "output_padding": (1, 1), "dilation": (1, 1), "groups": 1}
    (y,) = g.add_layer("conv_transpose", [y, w], attrs, name="up")
    g.outputs = [y]
    _check_bf16(g)


@needs_bf16
def test_linear_and_matmul_of_two_activations_in_bf16() -> None:
    g = Graph("bf16_gemms")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(24, Purpose.S), Dim(64, Purpose.C)])
    w = g.add_param("fc.weight", _f32(64, 64, scale=0.05))  # logits of order 1, as attention scales them
    b = g.add_param("fc.bias", _f32(64))
    (h,) = g.add_layer("linear", [x, w, b], name="fc")
    (h,) = g.add_layer("gelu", [h], name="gelu")
    (k,) = g.add_layer("permute", [h], {"perm": (0, 2, 1)}, name="keys")
    (s,) = g.add_layer("matmul", [h, k], name="scores")  # runtime weights: converted per call
    (p,) = g.add_layer("softmax", [s], {"axis": -1}, name="probs")  # DFP, fp32
    g.outputs = [p, h]
    _check_bf16(g)


@needs_bf16
def test_bf16_weights_follow_a_change_of_parameters() -> None:
    g = Graph("bf16_reprepare")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(8, Purpose.C), Dim(6, Purpose.P), Dim(6, Purpose.P)])
    g.outputs = [_conv(g, x, "conv", 8, 16)]
    compiled = compile_graph(g, "x86", passes=False, precision="bf16")
    first = _params(g)
    second = {name: (value * -2.0).astype(np.float32) for name, value in first.items()}
    for params in (first, second, first):  # run_numpy prepares each time: the bf16 packed copy is redone
        (error,) = _relative_errors(g, compiled, 2, params)
        assert FP32_ABOVE < error <= BF16_BOUND


@needs_bf16
def test_fp32_and_bf16_artifacts_are_distinct() -> None:
    def model() -> Graph:
        g = Graph("bf16_twins")
        x = g.add_input("x", [Dim(1, Purpose.N), Dim(8, Purpose.C), Dim(6, Purpose.P), Dim(6, Purpose.P)])
        g.outputs = [_conv(g, x, "conv", 8, 8)]
        return g

    fp32 = compile_graph(model(), "x86", passes=False)
    bf16 = compile_graph(model(), "x86", passes=False, precision="bf16")
    auto = compile_graph(model(), "x86", passes=False, precision="auto")
    assert fp32.precision == "fp32" and bf16.precision == auto.precision == "bf16"
    assert fp32.library_path != bf16.library_path == auto.library_path
    source = bf16.source_path.read_text()
    assert "SOL_DNNL_BF16" in source and "SOL_DNNL_BF16" not in fp32.source_path.read_text()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sol.config, "compiler::precision", "bf16")  # the config key alone does not change compile_graph
        assert compile_graph(model(), "x86", passes=False).precision == "fp32"
