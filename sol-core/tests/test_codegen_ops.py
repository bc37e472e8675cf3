"""Every op of the registry, generated, built and run, against the numpy reference.

Cases are grouped into a few graphs (one build each, to keep CI short); every
graph has a wildcard batch and runs at two batch sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
from _codegen_helpers import CaseGraph, check, private_cache, run_cases  # noqa: E402
from _extra_op_cases import indexing_graph, math_extra_graph  # noqa: E402
from _recurrent_op_cases import recurrent_graph  # noqa: E402
from _scatter_op_cases import scatter_graph  # noqa: E402
from _training_cases import training_graph  # noqa: E402
from sol.codegen.kernels import supported_ops  # noqa: E402
from sol.ir import all_ops  # noqa: E402

__all__ = ["private_cache"]

pytestmark = pytest.mark.usefixtures("private_cache")
RNG = np.random.default_rng(42)


def _positive(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0.2, 3.0, shape)


# -- elementwise ---------------------------------------------------------------
UNARY = {
    "relu": {}, "leaky_relu": {"negative_slope": 0.1}, "clamp": {"min": -0.5, "max": 0.7}, "clamp_lo": {"min": 0.0},
    "gelu": {"approximate": "none"}, "gelu_tanh": {"approximate": "tanh"}, "silu": {}, "sigmoid": {}, "tanh": {},
    "hardswish": {}, "hardsigmoid": {}, "elu": {"alpha": 0.7}, "softplus": {"beta": 2.0, "threshold": 1.0},
    "exp": {}, "neg": {}, "abs": {}, "erf": {}, "identity": {}, "cast_i32": {"dtype": "int32"},
    "cast_bool": {"dtype": "bool"}, "cast_f64": {"dtype": "float64"},
}
POSITIVE_UNARY = ("log", "sqrt", "rsqrt", "reciprocal")


def _unary_graph() -> CaseGraph:
    cg = CaseGraph("unary")
    x = cg.input("x", (0, 3, 4, 5), make=lambda s, r: r.standard_normal(s) * 3)
    xp = cg.input("xp", (0, 3, 4, 5), make=_positive)
    for name, attrs in UNARY.items():
        op = name.split("_")[0] if name.startswith(("cast", "clamp", "gelu")) else name
        cg.case(name, op, [x], attrs)
    for op in POSITIVE_UNARY:
        cg.case(op, op, [xp])
    return cg


BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge")


def _binary_graph() -> CaseGraph:
    cg = CaseGraph("binary")
    a = cg.input("a", (0, 3, 4, 5), make=lambda s, r: r.integers(-3, 4, s))  # small ints: comparisons hit equality
    b = cg.param("b", RNG.integers(-3, 4, (3, 1, 5)).astype(np.float32) + 0.5)
    c = cg.input("c", (0, 1, 4, 1))
    ia = cg.input("ia", (0, 6), "int64", make=lambda s, r: r.integers(-20, 20, s))
    ib = cg.param("ib", RNG.integers(1, 5, (6,)) * RNG.choice([-1, 1], 6))
    scalar = cg.graph.add_const("two", np.array(2.0, dtype=np.float32))
    for op in BINARY:
        cg.case(op, op, [a, b])
    cg.case("add_bcast_both", "add", [b, c])
    cg.case("mul_scalar", "mul", [a, scalar])
    cg.case("pow", "pow", [cg.input("base", (0, 3, 4, 5), make=_positive), b])
    cg.case("div_floor_int", "div", [ia, ib], {"rounding_mode": "floor"})
    cg.case("div_trunc_int", "div", [ia, ib], {"rounding_mode": "trunc"})
    cg.case("div_floor_float", "div", [a, b], {"rounding_mode": "floor"})
    cg.case("add_int", "add", [ia, ib])
    (cond,) = cg.case("gt_cond", "gt", [a, c])
    cg.case("where", "where", [cond, a, b])
    return cg


# -- dense: conv, conv_transpose, linear, matmul, attention ------------------------
CONV = {
    "conv_3x3": dict(cin=4, cout=6, k=(3, 3), stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1),
    "conv_s2_asym": dict(cin=4, cout=6, k=(3, 2), stride=(2, 2), padding=((1, 0), (0, 1)), dilation=(1, 1), groups=1),
    "conv_dil_groups": dict(cin=4, cout=6, k=(3, 3), stride=(1, 2), padding=((2, 2), (2, 2)), dilation=(2, 2), groups=2),
    "conv_depthwise": dict(cin=4, cout=4, k=(3, 3), stride=(2, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=4),
    "conv_1x1_nobias": dict(cin=4, cout=5, k=(1, 1), stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1),
}
CONV_T = {
    "convt_s2": dict(cin=4, cout=6, k=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1), dilation=(1, 1), groups=1),
    "convt_groups_dil": dict(cin=4, cout=4, k=(2, 3), stride=(1, 2), padding=(0, 1), output_padding=(0, 0), dilation=(2, 1), groups=2),
}


def _dense_graph() -> CaseGraph:
    cg = CaseGraph("dense")
    x = cg.input("x", (0, 4, 7, 9))
    for name, c in CONV.items():
        w = cg.param(f"{name}.w", RNG.standard_normal((c["cout"], c["cin"] // c["groups"], *c["k"])).astype(np.float32))
        ins = [x, w] if "nobias" in name else [x, w, cg.param(f"{name}.b", RNG.standard_normal(c["cout"]).astype(np.float32))]
        cg.case(name, "conv", ins, {k: c[k] for k in ("stride", "padding", "dilation", "groups")})
    x1 = cg.input("x1", (0, 3, 11))
    w1 = cg.param("conv1d.w", RNG.standard_normal((5, 3, 3)).astype(np.float32))
    cg.case("conv1d", "conv", [x1, w1], {"stride": (2,), "padding": ((1, 2),), "dilation": (1,), "groups": 1})
    for name, c in CONV_T.items():
        w = cg.param(f"{name}.w", RNG.standard_normal((c["cin"], c["cout"] // c["groups"], *c["k"])).astype(np.float32))
        b = cg.param(f"{name}.b", RNG.standard_normal(c["cout"]).astype(np.float32))
        cg.case(name, "conv_transpose", [x, w, b], {k: c[k] for k in ("stride", "padding", "output_padding", "dilation", "groups")})
    wt1 = cg.param("convt1d.w", RNG.standard_normal((3, 2, 4)).astype(np.float32))
    cg.case("convt1d", "conv_transpose", [x1, wt1], {"stride": (3,), "padding": (1,), "output_padding": (2,), "dilation": (1,), "groups": 1})
    seq = cg.input("seq", (0, 5, 8))
    wl = cg.param("fc.w", RNG.standard_normal((6, 8)).astype(np.float32))
    cg.case("linear_3d", "linear", [seq, wl, cg.param("fc.b", RNG.standard_normal(6).astype(np.float32))])
    cg.case("linear_nobias", "linear", [seq, wl])
    # the weight gradient of a linear layer: rows of every leading dim, and a column count over one block
    cg.case("linear_grad_weight_3d", "linear_grad_weight", [seq, cg.input("seq_dy", (0, 5, 6))])
    wide = cg.input("wide", (0, 700))
    cg.case("linear_grad_weight_wide", "linear_grad_weight", [wide, cg.input("wide_dy", (0, 3))])
    m2 = cg.param("m2", RNG.standard_normal((8, 3)).astype(np.float32))
    cg.case("matmul_2d_weight", "matmul", [seq, m2])
    bm = cg.input("bm", (0, 8, 4))
    cg.case("bmm", "matmul", [seq, bm])
    bt = cg.input("bt", (0, 3, 8))  # read transposed: the lowered attention's q @ k^T
    cg.case("bmm_transpose_b", "matmul", [seq, bt], {"transpose_b": True})
    bcast = cg.param("bcast", RNG.standard_normal((1, 8, 2)).astype(np.float32))
    cg.case("matmul_bcast", "matmul", [seq, bcast])
    vec = cg.param("vec", RNG.standard_normal(8).astype(np.float32))
    cg.case("matvec", "matmul", [seq, vec])
    rowv = cg.param("rowv", RNG.standard_normal(5).astype(np.float32))
    cg.case("vecmat", "matmul", [rowv, seq])
    q = cg.input("q", (0, 2, 5, 4))
    k = cg.input("k", (0, 2, 6, 4))
    v = cg.input("v", (0, 2, 6, 3))
    cg.case("attention", "attention", [q, k, v], {"scale": None, "is_causal": False})
    cg.case("attention_causal", "attention", [q, k, k], {"scale": 0.3, "is_causal": True})
    bool_mask = cg.graph.add_const("bool_mask", RNG.random((5, 6)) > 0.3)
    bool_mask.data[:, 0] = True  # never a fully masked row
    cg.case("attention_bool_mask", "attention", [q, k, v, bool_mask], {"scale": None, "is_causal": False})
    float_mask = cg.param("float_mask", RNG.standard_normal((2, 1, 6)).astype(np.float32))
    cg.case("attention_float_mask", "attention", [q, k, v, float_mask], {"scale": None, "is_causal": False})
    q_long = cg.input("q_long", (0, 2, 37, 8))  # tasks of 32 rows: 8 groups of four rows, then 1 + 4 + 1 rows
    k_long = cg.input("k_long", (0, 2, 11, 8))
    v_long = cg.input("v_long", (0, 2, 11, 5))
    cg.case("attention_row_groups", "attention", [q_long, k_long, v_long], {"scale": None, "is_causal": False})
    # masks and the causal limit on the four-row groups too (BERT's and GPT-2's attention always has a mask)
    cg.case("attention_row_groups_causal", "attention", [q_long, k_long, v_long], {"scale": 0.4, "is_causal": True})
    long_mask = cg.graph.add_const("long_mask", RNG.random((1, 37, 11)) > 0.4)
    long_mask.data[..., 3] = True  # never a fully masked row
    cg.case("attention_row_groups_bool_mask", "attention", [q_long, k_long, v_long, long_mask],
            {"scale": None, "is_causal": False})
    long_float = cg.param("long_float", RNG.standard_normal((2, 37, 11)).astype(np.float32))
    cg.case("attention_row_groups_float_mask_causal", "attention", [q_long, k_long, v_long, long_float],
            {"scale": None, "is_causal": True})
    return cg


# -- normalisation, reductions, pooling --------------------------------------------
def _norm_graph() -> CaseGraph:
    cg = CaseGraph("norm")
    x = cg.input("x", (0, 4, 7, 6), make=lambda s, r: r.standard_normal(s) * 2 + 1)
    c = 4
    mean, var = cg.param("bn.mean", RNG.standard_normal(c)), cg.param("bn.var", RNG.uniform(0.5, 2, c))
    w, b = cg.param("bn.w", RNG.standard_normal(c)), cg.param("bn.b", RNG.standard_normal(c))
    for t in (mean, var, w, b):
        t.data = t.data.astype(np.float32)
        t.dtype = "float32"
    cg.case("batch_norm", "batch_norm", [x, mean, var, w, b], {"eps": 1e-5})
    cg.case("batch_norm_noaffine", "batch_norm", [x, mean, var], {"eps": 1e-3})
    ln_w = cg.param("ln.w", RNG.standard_normal((7, 6)).astype(np.float32))
    ln_b = cg.param("ln.b", RNG.standard_normal((7, 6)).astype(np.float32))
    cg.case("layer_norm", "layer_norm", [x, ln_w, ln_b], {"normalized_ndim": 2, "eps": 1e-5})
    cg.case("layer_norm_last", "layer_norm", [x], {"normalized_ndim": 1, "eps": 1e-5})
    gn_w, gn_b = cg.param("gn.w", RNG.standard_normal(c).astype(np.float32)), cg.param("gn.b", RNG.standard_normal(c).astype(np.float32))
    cg.case("group_norm", "group_norm", [x, gn_w, gn_b], {"num_groups": 2, "eps": 1e-5})
    for axis in (1, -1):
        cg.case(f"softmax_{axis}", "softmax", [x], {"axis": axis})
        cg.case(f"log_softmax_{axis}", "log_softmax", [x], {"axis": axis})
    for op in ("reduce_mean", "reduce_sum", "reduce_max"):
        cg.case(f"{op}_hw", op, [x], {"axes": (2, 3), "keepdims": True})
        cg.case(f"{op}_c", op, [x], {"axes": (1,), "keepdims": False})
        cg.case(f"{op}_last", op, [x], {"axes": (-1,), "keepdims": False})
    pool = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}
    cg.case("max_pool", "max_pool", [x], {**pool, "dilation": (1, 1), "ceil_mode": False})
    cg.case("max_pool_ceil_dil", "max_pool", [x], {"kernel": (2, 3), "stride": (2, 2), "padding": (1, 0), "dilation": (2, 1), "ceil_mode": True})
    cg.case("avg_pool", "avg_pool", [x], {**pool, "ceil_mode": False, "count_include_pad": True, "divisor_override": None})
    cg.case("avg_pool_excl_ceil", "avg_pool", [x], {**pool, "ceil_mode": True, "count_include_pad": False, "divisor_override": None})
    cg.case("avg_pool_divisor", "avg_pool", [x], {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0), "ceil_mode": False,
                                                   "count_include_pad": True, "divisor_override": 3})
    cg.case("adaptive_avg_pool", "adaptive_avg_pool", [x], {"output_size": (3, 4)})
    cg.case("adaptive_avg_pool_1", "adaptive_avg_pool", [x], {"output_size": (1, 1)})
    cg.case("adaptive_max_pool", "adaptive_max_pool", [x], {"output_size": (4, None)})
    return cg


def _pool_graph() -> CaseGraph:
    """Row-major pools whose rows have left and right border pixels around an interior (kernels/pool.py's row
    buffer), in 1, 2 and 3 spatial dims, and inputs narrower than the window."""
    cg = CaseGraph("pool")
    x = cg.input("x", (0, 3, 9, 13), make=lambda s, r: r.standard_normal(s) * 2 + 1)
    narrow = cg.input("narrow", (0, 3, 4, 2))
    line = cg.input("line", (0, 3, 13))
    volume = cg.input("volume", (0, 2, 5, 6, 7))
    plain = {"dilation": (1, 1), "ceil_mode": False}
    average = {"ceil_mode": False, "count_include_pad": True, "divisor_override": None}
    cg.case("max_3x3_s1", "max_pool", [x], {"kernel": (3, 3), "stride": (1, 1), "padding": (1, 1), **plain})
    cg.case("max_3x3_s2_ceil", "max_pool", [x], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1),
                                                 "dilation": (1, 1), "ceil_mode": True})
    cg.case("max_5x4_uneven", "max_pool", [x], {"kernel": (5, 4), "stride": (2, 3), "padding": (2, 1), **plain})
    cg.case("max_narrow", "max_pool", [narrow], {"kernel": (3, 3), "stride": (1, 1), "padding": (1, 1), **plain})
    cg.case("avg_3x3_s1", "avg_pool", [x], {"kernel": (3, 3), "stride": (1, 1), "padding": (1, 1), **average})
    cg.case("avg_5x5_s2_ceil_excl", "avg_pool", [x], {"kernel": (5, 5), "stride": (2, 2), "padding": (2, 2),
                                                      "ceil_mode": True, "count_include_pad": False,
                                                      "divisor_override": None})
    cg.case("avg_narrow", "avg_pool", [narrow], {"kernel": (3, 3), "stride": (1, 1), "padding": (1, 1), **average})
    cg.case("max_1d", "max_pool", [line], {"kernel": (3,), "stride": (2,), "padding": (1,), "dilation": (1,),
                                          "ceil_mode": False})
    cg.case("avg_1d", "avg_pool", [line], {"kernel": (4,), "stride": (1,), "padding": (2,), **average})
    cg.case("max_3d", "max_pool", [volume], {"kernel": (2, 3, 3), "stride": (1, 2, 2), "padding": (0, 1, 1),
                                            "dilation": (1, 1, 1), "ceil_mode": False})
    cg.case("avg_3d", "avg_pool", [volume], {"kernel": (3, 3, 3), "stride": (2, 1, 2), "padding": (1, 1, 1), **average})
    return cg


# -- data movement -----------------------------------------------------------------
def _movement_graph() -> CaseGraph:
    from sol.ir import BATCH

    cg = CaseGraph("movement")
    x = cg.input("x", (0, 4, 5, 6))
    y = cg.input("y", (0, 2, 5, 6))
    cg.case("concat_c", "concat", [x, y, x], {"axis": 1})
    cg.case("concat_batch", "concat", [x, x], {"axis": 0})
    cg.case("split", "split", [x], {"axis": 1, "sizes": (1, 3)})
    cg.case("reshape_out", "reshape", [x], {"shape": (BATCH, 20, 6)})
    (flat,) = cg.graph.add_layer("reshape", [x], {"shape": (BATCH * 4, 30)}, name="flatten")
    cg.case("after_reshape", "relu", [flat])
    cg.case("permute", "permute", [x], {"perm": (0, 2, 3, 1)})
    cg.case("slice", "slice", [x], {"axis": 3, "start": 1, "stop": 6, "step": 2})
    for mode in ("constant", "reflect", "replicate", "circular"):
        cg.case(f"pad_{mode}", "pad", [x], {"pads": ((0, 0), (0, 0), (1, 2), (2, 1)), "mode": mode, "value": 0.5})
    small = cg.param("small", RNG.standard_normal((5, 1)).astype(np.float32))
    cg.case("expand", "expand", [small], {"shape": (3, 5, 4)})
    cg.case("channel_shuffle", "channel_shuffle", [x], {"groups": 2})
    idx = cg.input("idx", (0, 7), "int64", make=lambda s, r: r.integers(0, 10, s))
    table = cg.param("emb.weight", RNG.standard_normal((10, 4)).astype(np.float32))
    cg.case("embedding", "embedding", [idx, table])
    return cg


GROUPS = {"unary": _unary_graph, "binary": _binary_graph, "dense": _dense_graph, "norm": _norm_graph,
          "pool": _pool_graph, "movement": _movement_graph, "math_extra": math_extra_graph, "indexing": indexing_graph, "training": training_graph,
          "scatter": scatter_graph, "recurrent": recurrent_graph}
_CASES = [(group, case) for group, make in GROUPS.items() for case in make().cases]
_RESULTS: dict[str, object] = {}


@pytest.mark.parametrize(("group", "case"), _CASES, ids=[f"{g}-{c}" for g, c in _CASES])
def test_op_matches_reference(group: str, case: str) -> None:
    if group not in _RESULTS:
        _RESULTS[group] = run_cases(GROUPS[group]())
    check(_RESULTS[group], case)  # type: ignore[arg-type]


def test_every_registered_op_has_generated_code() -> None:
    missing = sorted(set(all_ops()) - supported_ops())
    assert not missing, f"ops without generated implementation: {missing}"


def test_every_registered_op_is_tested() -> None:
    used = {layer.op for make in GROUPS.values() for layer in make().graph.layers}
    untested = sorted(set(all_ops()) - used - {"dropout", "stochastic_depth", "contiguous"})
    assert not untested, f"ops without a codegen test: {untested}"
