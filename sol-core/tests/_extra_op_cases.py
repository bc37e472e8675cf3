"""Codegen cases of the ops added for ONNX (math_extra, indexing, reduction_extra); used by test_codegen_ops."""

from __future__ import annotations

import numpy as np
from _codegen_helpers import CaseGraph

FLOAT_UNARY = ("sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "floor", "ceil", "round", "sign", "isnan")
UNIT_UNARY = ("asin", "acos", "atanh")


def math_extra_graph() -> CaseGraph:
    cg = CaseGraph("math_extra")
    x = cg.input("x", (0, 3, 4), make=lambda s, r: np.round(r.standard_normal(s) * 4, 1))
    unit = cg.input("unit", (0, 3, 4), make=lambda s, r: r.uniform(-0.9, 0.9, s))
    big = cg.input("big", (0, 3, 4), make=lambda s, r: r.uniform(1.1, 5.0, s))
    ints = cg.input("ints", (0, 3, 4), dtype="int32", make=lambda s, r: r.integers(-9, 10, s))
    divisor = cg.input("divisor", (0, 3, 4), dtype="int32", make=lambda s, r: r.choice([-4, -3, 2, 5], s))
    flags = cg.input("flags", (0, 3, 4), dtype="bool", make=lambda s, r: r.integers(0, 2, s))
    for op in FLOAT_UNARY:
        cg.case(op, op, [x])
    for op in UNIT_UNARY:
        cg.case(op, op, [unit])
    cg.case("acosh", "acosh", [big])
    (inf,) = cg.graph.add_layer("div", [x, cg.graph.add_const("zero", np.zeros((), np.float32))])
    cg.case("isinf", "isinf", [inf])
    cg.case("isinf_neg", "isinf", [inf], {"detect_positive": False})
    cg.case("logical_not", "logical_not", [flags])
    cg.case("bitwise_not", "bitwise_not", [ints])
    cg.case("bitwise_not_bool", "bitwise_not", [flags])  # a logical not: ~true is not -2 here
    cg.case("bitwise_and_bool", "bitwise_and", [flags, cg.graph.add_const("mask", np.array([True, True, False, False]))])
    for op in ("fmod", "mod", "bitwise_and", "bitwise_or", "bitwise_xor"):
        cg.case(op, op, [ints, divisor])
    cg.case("fmod_float", "fmod", [x, big])
    cg.case("mod_float", "mod", [x, big])
    for op in ("logical_and", "logical_or", "logical_xor"):
        cg.case(op, op, [flags, cg.graph.add_const("pattern", np.array([True, False, True, False]))])
    return cg


def indexing_graph() -> CaseGraph:
    cg = CaseGraph("indexing")
    x = cg.input("x", (0, 5, 6))
    index = cg.graph.add_const("index", np.array([[4, -1], [0, 2]], dtype=np.int64))
    cg.case("gather", "gather", [x, index], {"axis": 2})
    cg.case("gather_axis1", "gather", [x, cg.graph.add_const("one", np.array(3, dtype=np.int64))], {"axis": 1})
    elements = cg.graph.add_const("elements", np.random.default_rng(1).integers(-6, 6, (1, 5, 3)).astype(np.int64))
    (narrow,) = cg.graph.add_layer("slice", [x], {"axis": 0, "start": 0, "stop": 1, "step": 1})
    cg.case("gather_elements", "gather_elements", [narrow, elements], {"axis": 2})
    # torch.gather's index may be smaller than x in the other dims
    smaller = cg.graph.add_const("smaller", np.array([[[1, 0], [3, 3]]], dtype=np.int64))
    cg.case("gather_elements_smaller", "gather_elements", [narrow, smaller], {"axis": 1})
    cg.case("argmax", "argmax", [x], {"axis": 2, "keepdims": True})
    cg.case("argmin", "argmin", [x], {"axis": 1, "keepdims": False, "select_last_index": True})
    cg.case("cumsum", "cumsum", [x], {"axis": 2})
    cg.case("cumsum_rev_excl", "cumsum", [x], {"axis": 1, "reverse": True, "exclusive": True})
    cg.case("reduce_min", "reduce_min", [x], {"axes": (1,), "keepdims": True})
    cg.case("reduce_prod", "reduce_prod", [x], {"axes": (1, 2), "keepdims": False})
    return cg
