"""Every pass terminates: the CoaT pattern that made `elementwise_before_permute` loop, and the driver's budget."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from sol.errors import SolError, SolPassBudgetError
from sol.ir import Dim, Graph, Purpose
from sol.ir.interpret import run_reference
from sol.passes import INFERENCE_PASSES, elementwise_before_permute, run_inference_passes, run_passes
from sol.passes.budget import MIN_REWRITES, REWRITES_PER_LAYER, pass_budget, rewrite_budget, step

rng = np.random.default_rng(3)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def heads_input(g: Graph, batch: int = 2) -> object:
    # (batch, heads, tokens, head dim), as CoaT's factorized attention holds q and v
    return g.add_input("x", [Dim(batch, Purpose.N), Dim(3, Purpose.C), Dim(5, Purpose.S), Dim(4, Purpose.C)])


def coat_crpe_graph() -> Graph:
    """CoaT's convolutional relative position encoding: ``q * conv_v.transpose(-1, -2)``, followed by more
    elementwise layers; ``q`` and ``conv_v`` are written by layers and read only by the mul."""
    g = Graph("coat_crpe")
    x = heads_input(g)
    (q,) = g.add_layer("relu", [x], name="q")                           # a produced value only the mul reads
    (v,) = g.add_layer("sigmoid", [x], name="conv_v")                    # (2, 3, 5, 4)
    (vt,) = g.add_layer("permute", [v], {"perm": (0, 1, 3, 2)}, name="to_tokens_last")  # (2, 3, 4, 5)
    (v2,) = g.add_layer("tanh", [vt], name="conv")                      # another producer, read by one permute
    (back,) = g.add_layer("permute", [v2], {"perm": (0, 1, 3, 2)}, name="transpose")    # (2, 3, 5, 4)
    (m,) = g.add_layer("mul", [q, back], name="crpe")
    (a,) = g.add_layer("add", [m, g.add_param("bias", rand(4))], name="bias")
    (r,) = g.add_layer("relu", [a], name="act")
    g.outputs = [r]
    return g


def assert_same(before: Graph, after: Graph, batch: int = 2) -> None:
    inputs = [rand(batch, 3, 5, 4)]
    for got, want in zip(run_reference(after, inputs), run_reference(before, inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_coat_pattern_terminates() -> None:
    # before the fix, mul moved across `transpose`, then back across the inverse permute of q it had inserted,
    # and so on without end (each round one permute more); under the driver it now finishes well inside budget
    g = coat_crpe_graph()
    before = copy.deepcopy(g)
    run_passes(g, (elementwise_before_permute,))
    assert_same(before, g)
    # the mul stays after `transpose` (moving it would only trade that permute for one on q)
    assert sum(layer.op == "permute" for layer in g.layers) == 2
    mul = next(layer for layer in g.layers if layer.op == "mul")
    assert g.producers()[id(mul.inputs[1])].name == "transpose"
    run_inference_passes(g)
    assert_same(before, g)


def test_lower_rank_full_size_operand_is_not_moved_across() -> None:
    # a (3, 4, 5) operand of a (1, 3, 4, 5) value is full size: padding it to rank 4 makes a reshape that only
    # its permute reads, which would be the next candidate
    g = Graph("lower_rank")
    x = heads_input(g, batch=1)
    (h,) = g.add_layer("relu", [x], name="producer")
    (y,) = g.add_layer("permute", [h], {"perm": (0, 1, 3, 2)})
    (z,) = g.add_layer("mul", [y, g.add_param("table", rand(3, 4, 5))], name="scale")
    g.outputs = [z]
    before = copy.deepcopy(g)
    layers = list(g.layers)
    run_passes(g, (elementwise_before_permute,))
    assert g.layers == layers
    assert_same(before, g, batch=1)


def test_full_size_operand_with_other_readers_still_moves() -> None:
    # the ConvNeXt case the pass exists for: the residual has another reader, so its inverse permute is final
    g = Graph("residual")
    x = heads_input(g)
    (h,) = g.add_layer("relu", [x], name="producer")
    (y,) = g.add_layer("permute", [h], {"perm": (0, 1, 3, 2)})
    (xt,) = g.add_layer("permute", [x], {"perm": (0, 1, 3, 2)})
    (res,) = g.add_layer("tanh", [xt], name="residual")  # (2, 3, 4, 5): read by the add and the output
    (z,) = g.add_layer("add", [y, res], name="add")
    g.outputs = [z, res]
    before = copy.deepcopy(g)
    run_passes(g, (elementwise_before_permute,))
    assert_same(before, g)
    add = next(layer for layer in g.layers if layer.op == "add")
    assert add.inputs[0] is h and g.producers()[id(add.inputs[1])].op == "permute"
    assert g.layers[-1].op == "permute" and g.layers[-1].outputs == [z]


@pytest.mark.parametrize("depth", [1, 4])
def test_chain_after_nested_permutes_terminates(depth: int) -> None:
    # permutes of permutes with mul chains whose every operand is a produced value read once: nothing may ping-pong
    g = Graph("nested")
    x = heads_input(g)
    t = g.add_layer("relu", [x], name="start")[0]
    for i in range(depth):
        t = g.add_layer("permute", [t], {"perm": (0, 1, 3, 2)}, name=f"p{i}")[0]
        other = g.add_layer("sigmoid", [x] if i % 2 else [g.add_layer("permute", [x], {"perm": (0, 1, 3, 2)})[0]])[0]
        t = g.add_layer("mul", [t, other], name=f"mul{i}")[0]
        t = g.add_layer("add", [t, g.add_param(f"b{i}", rand(1))], name=f"add{i}")[0]
    g.outputs = [t]
    before = copy.deepcopy(g)
    for passes in ((elementwise_before_permute,), INFERENCE_PASSES):
        run_passes(g, passes)
        assert_same(before, g)


def forever(graph: Graph) -> Graph:
    """A deliberately non-terminating pass: each rewrite creates its own next candidate."""
    x = graph.outputs[0]
    while True:
        step(graph)
        (x,) = graph.add_layer("relu", [x])
        graph.outputs = [x]


def test_driver_stops_a_pass_that_does_not_terminate() -> None:
    g = coat_crpe_graph()
    with pytest.raises(SolPassBudgetError, match=r"graph pass 'forever' did not finish on model 'coat_crpe'") as info:
        run_passes(g, (remove_nothing, forever))
    assert isinstance(info.value, SolError)
    # the budget is proportional to the graph the pass started on
    assert str(REWRITES_PER_LAYER * 8 + MIN_REWRITES) in str(info.value)
    assert len(g.layers) == 8 + REWRITES_PER_LAYER * 8 + MIN_REWRITES


def remove_nothing(graph: Graph) -> Graph:
    for _ in range(rewrite_budget(graph)):  # a pass that uses its whole budget is fine
        step(graph)
    return graph


def test_budget_counts_only_inside_the_driver() -> None:
    for _ in range(MIN_REWRITES + 1):
        step()  # no driver: nothing counts
    g = coat_crpe_graph()
    with pass_budget("toy", g, limit=2):
        step(g)
        step(g)
        with pytest.raises(SolPassBudgetError, match="'toy'.*'coat_crpe'"):
            step(g)
    step(g)  # the budget ended with its pass
