"""Codegen cases of the scatter / N-d gather / selection ops (scatter, selection, pool_indices) and of dilated
average pooling; used by test_codegen_ops."""

from __future__ import annotations

import numpy as np
from _codegen_helpers import CaseGraph


def scatter_graph() -> CaseGraph:
    cg = CaseGraph("scatter")
    rng = np.random.default_rng(7)
    x = cg.input("x", (0, 5, 6))
    small = cg.input("small", (0, 3, 4), make=lambda s, r: np.round(r.standard_normal(s) * 4, 1))
    (first,) = cg.graph.add_layer("slice", [x], {"axis": 0, "start": 0, "stop": 1, "step": 1})
    upd = cg.graph.add_const("upd", rng.standard_normal((1, 5, 3)).astype(np.float32))
    # repeated indices (-1 and 5 name one column): the last update wins, or all combine
    idx = cg.graph.add_const("idx", np.array([[[0, 5, -1]] * 5], dtype=np.int64))
    for reduction in ("none", "add", "mul", "max", "min"):
        cg.case(f"scatter_elements_{reduction}", "scatter_elements", [first, idx, upd], {"axis": 2, "reduction": reduction})
    rows = cg.graph.add_const("rows", np.array([[[4, 0, 1]], [[2, 2, 3]]], dtype=np.int64).reshape(1, 2, 3))
    upd_rows = cg.graph.add_const("upd_rows", rng.standard_normal((1, 2, 3)).astype(np.float32))
    cg.case("scatter_elements_axis1", "scatter_elements", [first, rows, upd_rows], {"axis": 1})
    # scatter_nd into [batch, 5, 6]: 2-tuples name (batch, row) and write whole rows; 3-tuples write elements
    pairs = cg.graph.add_const("pairs", np.array([[0, 1], [0, -1], [0, 1]], dtype=np.int64))
    upd_pairs = cg.graph.add_const("upd_pairs", rng.standard_normal((3, 6)).astype(np.float32))
    for reduction in ("none", "add", "max"):
        cg.case(f"scatter_nd_{reduction}", "scatter_nd", [x, pairs, upd_pairs], {"reduction": reduction})
    triples = cg.graph.add_const("triples", np.array([[[0, 2, 3], [0, 0, 0]]], dtype=np.int64))
    upd_triples = cg.graph.add_const("upd_triples", np.array([[7.0, -7.0]], dtype=np.float32))
    cg.case("scatter_nd_elements", "scatter_nd", [x, triples, upd_triples], {"reduction": "mul"})
    # gather_nd: rows of every batch element, and batch_dims=1 (each batch element its own 2-tuples)
    cg.case("gather_nd_rows", "gather_nd", [first, cg.graph.add_const("g", np.array([[0, 4], [0, -2]], dtype=np.int64))])
    cg.case("gather_nd_batch", "gather_nd",
            [first, cg.graph.add_const("gb", np.array([[[1, 2], [4, 5], [0, 0]]], dtype=np.int64))], {"batch_dims": 1})
    # topk: ties (rounded values) keep index order
    cg.case("topk_largest", "topk", [small], {"axis": 2, "k": 3})
    cg.case("topk_smallest", "topk", [small], {"axis": 1, "k": 2, "largest": False})
    cg.case("cumprod", "cumprod", [small], {"axis": 2})
    cg.case("cumprod_rev_excl", "cumprod", [small], {"axis": 1, "reverse": True, "exclusive": True})
    image = cg.input("image", (0, 2, 5, 7))
    cg.case("max_pool_indices", "max_pool_indices", [image],
            {"kernel": (3, 2), "stride": (2, 2), "padding": ((1, 0), (1, 1)), "dilation": (1, 2), "ceil_mode": True})
    cg.case("max_pool_indices_cols", "max_pool_indices", [image],
            {"kernel": (2, 2), "stride": (1, 2), "padding": (0, 0), "storage_order": 1})
    # dilated average pooling (ONNX AveragePool with dilations): the divisor counts the dilated taps
    for include in (False, True):
        cg.case(f"avg_pool_dilated_{int(include)}", "avg_pool", [image],
                {"kernel": (2, 3), "stride": (2, 1), "padding": (1, 1), "dilation": (2, 2), "ceil_mode": True,
                 "count_include_pad": include})
    (pooled,) = cg.graph.add_layer("avg_pool", [image], {"kernel": (2, 3), "stride": (1, 2), "padding": (1, 1),
                                                         "dilation": (2, 2), "count_include_pad": False})
    cg.case("avg_pool_grad_dilated", "avg_pool_grad", [pooled],
            {"kernel": (2, 3), "stride": (1, 2), "padding": (1, 1), "dilation": (2, 2), "count_include_pad": False,
             "input_shape": image.shape})
    return cg
