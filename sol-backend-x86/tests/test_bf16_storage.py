"""bf16 storage of the activations between bf16 library calls (sol.codegen.storage, x86::bf16_storage).

In precision="bf16" an fp32 activation whose readers include a bf16 oneDNN call, and which every other reader
and its producer can take as bf16, lies in memory as bf16: oneDNN writes it (fp32 accumulation and post-ops,
one rounding) and reads it without a conversion; generated Clusters widen it on load and round on store. Each
graph is checked against SOL's float64 reference (the bound of test_precision), for which tensors are stored
as bf16 (the pointer declarations of the generated source), and that inputs and outputs keep float32.
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
from sol_backend_x86 import precision
from sol_backend_x86.flavour import onednn_paths

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
import _graph_builders as builders  # noqa: E402

RNG = np.random.default_rng(11)
CONV = {"stride": (1, 1), "dilation": (1, 1), "groups": 1}
BF16_BOUND = 2e-2  # as test_precision: bf16 operands, fp32 accumulation
FP32_ABOVE = 1e-5  # an fp32 run stays near 1e-6: the check that bf16 ran

pytestmark = pytest.mark.skipif(
    onednn_paths() is None or not precision.native_bf16(),
    reason="needs oneDNN and a CPU with native bf16 (amx_bf16 or avx512_bf16 in /proc/cpuinfo)")


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return builders.f32(RNG, *shape, scale=scale)


def _conv(g: Graph, x: Tensor, name: str, cin: int, cout: int, k: int = 3, groups: int = 1, stride: int = 1) -> Tensor:
    return builders.conv(RNG, g, x, name, cin, cout, k, groups, stride)


def _stored_bf16(source: str) -> set[str]:
    """Names of the tensors the generated source declares as bf16 storage."""
    return set(re.findall(r"uint16_t\* \w+ = \(uint16_t\*\)\(.*?\);  // (\S+) \[.*stored as bfloat16\)", source))


def _errors(g: Graph, compiled, batch: int) -> list[float]:  # type: ignore[no-untyped-def]
    params = {name: t.data for name, t in g.params.items()}
    inputs = [_f32(batch, *[int(s) for s in t.shape[1:]]) for t in g.inputs]
    got = compiled.run_numpy(inputs, params)
    exact = run_reference(g, [i.astype(np.float64) for i in inputs],
                          {k: np.asarray(v, np.float64) for k, v in params.items()})
    errors = []
    for a, b in zip(got, exact, strict=True):
        assert a.dtype == np.float32  # outputs keep the graph's dtype
        errors.append(float(np.abs(a - b).max() / np.abs(b).max()))
    return errors


def _check(g: Graph, batches: tuple[int, ...] = (1, 3)):  # type: ignore[no-untyped-def]
    compiled = compile_graph(g, "x86", passes=False, precision="bf16")
    for batch in batches:
        for error in _errors(g, compiled, batch):
            assert FP32_ABOVE < error <= BF16_BOUND, f"{g.name} at batch {batch}: relative error {error:.2e}"
    return compiled


def _residual_cnn(name: str) -> Graph:
    """conv -> relu -> conv + residual -> max_pool (generated) -> conv -> avg pool -> linear; the residual's source
    is also a model output."""
    g = Graph(name)
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(16, Purpose.C), Dim(12, Purpose.P), Dim(12, Purpose.P)])
    stem = _conv(g, x, "stem", 16, 32)
    (stem,) = g.add_layer("relu", [stem], name="stem_relu")
    (h,) = g.add_layer("relu", [_conv(g, stem, "conv1", 32, 32)], name="relu1")
    h = _conv(g, h, "conv2", 32, 32)
    (h,) = g.add_layer("add", [h, stem], name="residual")  # stem: a binary post-op operand stored as bf16
    (h,) = g.add_layer("relu", [h], name="block_relu")
    (p,) = g.add_layer("max_pool", [h], {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1),
                                         "ceil_mode": False}, name="pool")
    q = _conv(g, p, "conv3", 32, 48)
    (q,) = g.add_layer("relu", [q], name="relu3")
    (v,) = g.add_layer("adaptive_avg_pool", [q], {"output_size": (1, 1)}, name="gap")
    (v,) = g.add_layer("reshape", [v], {"shape": (BATCH, 48)}, name="flat")
    w = g.add_param("fc.weight", _f32(10, 48, scale=0.2))
    b = g.add_param("fc.bias", _f32(10))
    (y,) = g.add_layer("linear", [v, w, b], name="fc")
    g.outputs = [y, h]
    return g


def test_activations_between_bf16_calls_are_stored_as_bf16() -> None:
    compiled = _check(_residual_cnn("bf16_storage_cnn"))
    source = compiled.source_path.read_text()
    stored = _stored_bf16(source)
    # written by oneDNN (stem_relu, relu1) or a Cluster (the pools), read by oneDNN calls (and stem_relu by the
    # residual add as a bf16 post-op operand)
    assert {"stem_relu", "relu1", "pool", "gap"} <= stored, stored
    # a model input and output keep float32: x (the graph's input), block_relu (an output, read by the pool)
    assert not {"x", "block_relu", "fc"} & stored
    assert "d->post[0].src1.type = SOL_DNNL_BF16;  // stem_relu is stored as bf16" in source
    assert "sol_bf16_store(" in source and "sol_bf16_load(" in source  # the Clusters convert


def test_a_pool_or_concat_between_bf16_calls_reads_bf16() -> None:
    """conv -> max_pool -> conv and two convs -> concat -> conv: rounding commutes with a max or a copy, so the tensors
    only those Clusters read are stored as bf16 too (the results are what fp32 storage would give)."""
    g = Graph("bf16_storage_movers")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(8, Purpose.C), Dim(12, Purpose.P), Dim(12, Purpose.P)])
    (a,) = g.add_layer("relu", [_conv(g, x, "stem", 8, 16)], name="stem_relu")
    (p,) = g.add_layer("max_pool", [a], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1),
                                         "ceil_mode": False}, name="pool")
    left, right = _conv(g, p, "left", 16, 16, k=1), _conv(g, p, "right", 16, 16)
    (cat,) = g.add_layer("concat", [left, right], {"axis": 1}, name="cat")
    g.outputs = [_conv(g, cat, "head", 32, 8)]
    compiled = _check(g)
    stored = _stored_bf16(compiled.source_path.read_text())
    assert {"stem_relu", "pool"} <= stored, stored
    assert {"left", "right", "cat"} <= stored, stored


def test_storage_off_keeps_every_activation_fp32() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sol.config, "x86::bf16_storage", False)
        compiled = _check(_residual_cnn("bf16_storage_off"))
    source = compiled.source_path.read_text()
    assert _stored_bf16(source) == set() and "uint16_t*" not in source
    assert "SOL_DNNL_BF16" in source  # the calls still compute in bf16


def test_fp32_never_stores_bf16() -> None:
    g = _residual_cnn("bf16_storage_fp32")
    compiled = compile_graph(g, "x86", passes=False)
    assert _stored_bf16(compiled.source_path.read_text()) == set()
    for error in _errors(g, compiled, 2):
        assert error < FP32_ABOVE


def test_attention_block_stores_bf16_between_its_gemms() -> None:
    """linear -> layer norm (generated, fp32 statistics) -> q/k/v linears -> scores (matmul of two activations) ->
    softmax (generated, fp32) -> probs @ v -> linear; reshapes in between share their source's storage."""
    g = Graph("bf16_storage_attention")
    s, d = 20, 64
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(s, Purpose.S), Dim(d, Purpose.C)])

    def linear(t: Tensor, name: str, out: int = d) -> Tensor:
        w = g.add_param(f"{name}.weight", _f32(out, t.shape[-1], scale=0.08))
        b = g.add_param(f"{name}.bias", _f32(out, scale=0.1))
        (y,) = g.add_layer("linear", [t, w, b], name=name)
        return y

    h = linear(x, "embed")
    gamma, beta = g.add_param("ln.weight", _f32(d) * 0.1 + 1), g.add_param("ln.bias", _f32(d, scale=0.1))
    (n,) = g.add_layer("layer_norm", [h, gamma, beta], {"normalized_ndim": 1, "eps": 1e-5}, name="ln")
    q, k, v = (linear(n, name) for name in ("q", "k", "v"))
    (kt,) = g.add_layer("permute", [k], {"perm": (0, 2, 1)}, name="kt")
    (scores,) = g.add_layer("matmul", [q, kt], name="scores")
    (probs,) = g.add_layer("softmax", [scores], {"axis": -1}, name="probs")
    (ctx,) = g.add_layer("matmul", [probs, v], name="ctx")
    (ctx,) = g.add_layer("gelu", [ctx], name="act")
    g.outputs = [linear(ctx, "out")]
    compiled = _check(g)
    stored = _stored_bf16(compiled.source_path.read_text())
    assert {"ln", "q", "v", "probs", "act"} <= stored, stored
    assert "x" not in stored and "out" not in stored


def test_rounding_of_generated_stores_is_to_nearest_even() -> None:
    """A Cluster's store rounds as oneDNN does: the identity below feeds a bf16 call, so it is stored as bf16;
    the 1x1 conv with weight 1 reads it back exactly, so the output is the rounded input."""
    g = Graph("bf16_storage_rounding")
    x = g.add_input("x", [Dim(1, Purpose.N), Dim(1, Purpose.C), Dim(1, Purpose.P), Dim(8, Purpose.P)])
    (h,) = g.add_layer("mul", [x, g.add_param("two", np.full((1,), 2.0, np.float32))], name="double")
    w = g.add_param("one.weight", np.ones((1, 1, 1, 1), np.float32))
    (y,) = g.add_layer("conv", [h, w], {**CONV, "padding": ((0, 0), (0, 0))}, name="one")
    g.outputs = [y]
    compiled = compile_graph(g, "x86", passes=False, precision="bf16")
    assert "double" in _stored_bf16(compiled.source_path.read_text())
    ulp = 2.0 ** -7  # bf16's spacing in [1, 2)
    # halfway cases round to even (1 stays, 1 + 3 ulp/2 -> 1 + 2 ulp), others to nearest; NaN stays NaN
    values = np.array([1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 4, 1 + 3 * ulp / 4, -1 - ulp / 2, 3.0e38, np.nan, 0.0],
                      np.float32) / 2
    expected = np.array([1, 1 + 2 * ulp, 1, 1 + ulp, -1, np.float32(3.0e38), np.nan, 0.0], np.float32)
    expected[5] = _bf16_reference(np.float32(3.0e38))
    (got,) = compiled.run_numpy([values.reshape(1, 1, 1, 8)], {name: t.data for name, t in g.params.items()})
    np.testing.assert_array_equal(got.reshape(-1), expected)


def _bf16_reference(value: np.float32) -> np.float32:
    """Round-to-nearest-even to bf16 of one finite float32, in numpy."""
    bits = np.array([value], np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return rounded.view(np.float32)[0]
