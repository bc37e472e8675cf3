"""Planning: the prepare/main split, depth-first clusters, buffer reuse; and what the source looks like."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
from _codegen_helpers import ATOL, RTOL, dims, private_cache  # noqa: E402
from sol.codegen import plan  # noqa: E402
from sol.codegen.cluster import plan_programs  # noqa: E402
from sol.codegen.dnn import DnnCall, DnnCode, DnnModule  # noqa: E402
from sol.codegen.memory import plan_memory  # noqa: E402
from sol.compiler import compile_graph, generate_source  # noqa: E402
from sol.ir import BATCH, Graph, Layer, Tensor  # noqa: E402
from sol.ir.interpret import run_reference  # noqa: E402

__all__ = ["private_cache"]
RNG = np.random.default_rng(7)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _residual_block() -> Graph:
    g = Graph("block")
    x = g.add_input("x", dims(0, 4, 6, 6))
    w = g.add_param("layer1.0.conv1.weight", _f32(4, 4, 3, 3))
    b = g.add_param("layer1.0.conv1.bias", _f32(1, 4, 1, 1))
    attrs = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    (y,) = g.add_layer("conv", [x, w], attrs, name="layer1.0.conv1")
    (y,) = g.add_layer("add", [y, b], name="layer1.0.bias")
    (y,) = g.add_layer("relu", [y], name="layer1.0.relu")
    (y,) = g.add_layer("add", [y, x], name="layer1.0.residual")
    g.outputs = [y]
    return g


def test_conv_bias_relu_add_is_one_cluster() -> None:
    p = plan(_residual_block())
    assert len(p.programs.main) == 1
    assert [layer.name for layer in p.programs.main[0].layers] == [
        "layer1.0.conv1", "layer1.0.bias", "layer1.0.relu", "layer1.0.residual"]
    assert p.memory.workspace.at(8) == 0  # nothing between the layers is materialised


def test_fused_source_has_one_loop_nest_and_names_every_layer() -> None:
    source = generate_source(_residual_block())
    forward = source[source.index("_forward("):]
    # one nest: the batch loop appears once, under one parallel pragma
    assert len(re.findall(r"for \(int64_t n = 0;", forward)) == 1
    assert forward.count("#pragma omp parallel for") == 1
    for name in ("layer1.0.conv1: conv 3x3 s1", "layer1.0.bias: add", "layer1.0.relu: relu", "layer1.0.residual: add"):
        assert f"// {name}" in forward
    assert "#pragma omp simd" in forward
    # one store, of the cluster's result only
    assert forward.count("// store") == 1


def test_a_short_innermost_loop_is_unrolled_inside_the_vector_loop() -> None:
    """NCHW RGB -> NHWC: the 3-channel loop is innermost in memory order; the width loop is vectorised around it."""
    from sol.codegen.nest import Loop, nest_in_order

    [outer] = nest_in_order(["n", "c", "h", "w"], ["N", "3", "224", "224"], [], (0, 2, 3, 1))
    loops = [outer]
    while loops[-1].body:
        loops.append(loops[-1].body[0])
    assert all(isinstance(loop, Loop) for loop in loops)
    assert [(loop.var, loop.parallel, loop.vector) for loop in loops] == [
        ("n", True, False), ("h", True, False), ("w", True, True), ("c", False, False)]
    # a long innermost loop stays the vector loop
    [outer] = nest_in_order(["n", "c", "h", "w"], ["N", "64", "56", "56"], [], (0, 2, 3, 1))
    assert outer.body[0].body[0].body[0].vector and outer.body[0].body[0].body[0].var == "c"


def test_channels_last_copy_of_a_3_channel_image_matches_the_reference() -> None:
    g = Graph("to_nhwc")
    x = g.add_input("x", dims(0, 3, 10, 10))
    (y,) = g.add_layer("permute", [x], {"perm": (0, 2, 3, 1)}, name="to_nhwc")
    (z,) = g.add_layer("mul", [y, g.add_param("scale", _f32(3))], name="scale")
    g.outputs = [z]
    inputs = [_f32(2, 3, 10, 10)]
    params = {n: t.data for n, t in g.params.items()}
    source = generate_source(g)
    # the 3-channel loop runs inside the vector loop over the width
    assert re.search(r"#pragma omp simd\n\s*for \(int64_t i2 = 0; i2 < 10; \+\+i2\) \{\n\s*for \(int64_t i3 = 0; i3 < 3;",
                     source)
    np.testing.assert_allclose(compile_graph(g, passes=False).run_numpy(inputs, params)[0],
                               run_reference(g, inputs, params)[0], rtol=RTOL, atol=ATOL)


def test_value_used_outside_its_cluster_is_materialised() -> None:
    g = Graph("two_users")
    x = g.add_input("x", dims(0, 8))
    (a,) = g.add_layer("relu", [x], name="act")
    (s,) = g.add_layer("softmax", [a], {"axis": 1}, name="soft")
    (e,) = g.add_layer("exp", [a], name="exp")  # fused into act's cluster
    g.outputs = [s, e]
    p = plan(g)
    clusters = [[layer.name for layer in c.layers] for c in p.programs.main]
    assert clusters == [["act", "exp"], ["soft"]]
    assert p.memory.of(a) is not None and p.memory.of(a).kind == "workspace"


class _ScaleFoldingLibrary(DnnModule):
    """A DNN module that runs convolutions and takes over the multiply before them (like x86's input scales)."""

    name = "test"

    def accepts(self, layer: Layer) -> bool:
        return layer.op == "conv"

    def fuses(self, call: DnnCall, value: Tensor, layer: Layer) -> bool:
        return False

    def absorbs_input_scale(self, mul: Layer, layer: Layer) -> bool:
        return True

    def render(self, call: DnnCall, forward: object, prepare: object) -> DnnCode:
        return DnnCode()


def test_a_library_call_takes_over_the_scale_of_its_input() -> None:
    """x * gate read only by a library conv runs in that call: the product gets no memory, x and the gate do."""
    g = Graph("gated")
    x = g.add_input("x", dims(0, 4, 6, 6))
    (squeezed,) = g.add_layer("adaptive_avg_pool", [x], {"output_size": (1, 1)}, name="squeeze")
    (gate,) = g.add_layer("sigmoid", [squeezed], name="gate")
    (scaled,) = g.add_layer("mul", [gate, x], name="scale")
    w = g.add_param("project.weight", _f32(2, 4, 1, 1))
    attrs = {"stride": (1, 1), "padding": ((0, 0), (0, 0)), "dilation": (1, 1), "groups": 1}
    (y,) = g.add_layer("conv", [scaled, w], attrs, name="project")
    g.outputs = [y]
    programs = plan_programs(g, _ScaleFoldingLibrary())
    calls = [c for c in programs.main if c.dnn is not None]
    assert [[layer.name for layer in c.layers] for c in calls] == [["scale", "project"]]
    call = calls[0].dnn
    assert call is not None and call.source is x and call.scale is gate
    memory = plan_memory(programs, g.inputs, list(g.params.values()))
    assert memory.of(scaled) is None and memory.of(gate) is not None and memory.of(x) is not None


def test_memory_planning_reuses_buffers_on_a_chain() -> None:
    g = Graph("chain")
    t = g.add_input("x", dims(0, 16, 32))
    for i in range(6):  # softmax is an anchor: each result is materialised for the next
        (t,) = g.add_layer("softmax", [t], {"axis": -1}, name=f"soft{i}")
    g.outputs = [t]
    p = plan(g)
    mem = p.memory
    assert mem.unshared.at(4) == 5 * 4 * 16 * 32 * 4  # five intermediates (the last one is the output)
    assert mem.workspace.at(4) < mem.unshared.at(4)
    assert len(mem.slots) == 2  # ping-pong
    assert mem.workspace.a > 0  # affine in the batch


def test_reshape_is_a_free_alias() -> None:
    g = Graph("flat")
    x = g.add_input("x", dims(0, 4, 5))
    (a,) = g.add_layer("exp", [x], name="exp")
    (f,) = g.add_layer("reshape", [a], {"shape": (BATCH, 20)}, name="flatten")
    (s,) = g.add_layer("softmax", [f], {"axis": 1}, name="soft")
    g.outputs = [s]
    p = plan(g)
    assert [c.alias for c in p.programs.main] == [False, True, False]
    assert p.memory.of(f) == p.memory.of(a)


def test_reshape_of_a_constant_is_a_view_of_its_array(private_cache: None) -> None:
    """Unfolded (no passes), reshapes of a constant read the constant's own array."""
    g = Graph("const_view")
    x = g.add_input("x", dims(0, 2, 3))
    (c,) = g.add_layer("reshape", [g.add_const("c", np.arange(3, dtype=np.float32))], {"shape": (1, 3)}, name="row")
    (c,) = g.add_layer("reshape", [c], {"shape": (1, 1, 3)}, name="rows")
    (y,) = g.add_layer("add", [x, c], name="plus")
    g.outputs = [y]
    inputs = [_f32(2, 2, 3)]
    got = compile_graph(g, passes=False).run_numpy(inputs, {})[0]
    np.testing.assert_allclose(got, run_reference(g, inputs, {})[0], rtol=RTOL, atol=ATOL)


def test_parameter_only_layers_run_in_prepare(private_cache: None) -> None:
    """What BatchNorm folding leaves behind (scale = w / sqrt(var + eps)) is computed once, in prepare."""
    g = Graph("folded")
    x = g.add_input("x", dims(0, 3, 4, 4))
    var = g.add_param("bn.running_var", RNG.uniform(0.5, 2, 3).astype(np.float32))
    w = g.add_param("bn.weight", _f32(3))
    eps = g.add_const("eps", np.array(1e-5, dtype=np.float32))
    (v,) = g.add_layer("add", [var, eps], name="bn.var_eps")
    (sd,) = g.add_layer("sqrt", [v], name="bn.std")
    (scale,) = g.add_layer("div", [w, sd], name="bn.scale")
    (scale4,) = g.add_layer("reshape", [scale], {"shape": (1, 3, 1, 1)}, name="bn.scale_view")
    (y,) = g.add_layer("mul", [x, scale4], name="bn.apply")
    g.outputs = [y, scale]
    p = plan(g)
    assert [layer.name for c in p.programs.prepare for layer in c.layers] == [
        "bn.var_eps", "bn.std", "bn.scale", "bn.scale_view"]
    assert p.memory.derived_bytes > 0
    compiled = compile_graph(g, passes=False)
    params = {n: t.data for n, t in g.params.items()}
    inputs = [_f32(2, 3, 4, 4)]
    for got, expected in zip(compiled.run_numpy(inputs, params), run_reference(g, inputs, params), strict=True):
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    # new parameter values: prepare recomputes the derived ones
    params["bn.weight"] = params["bn.weight"] * 2
    got = compiled.run_numpy(inputs, params)[0]
    np.testing.assert_allclose(got, run_reference(g, inputs, params)[0], rtol=RTOL, atol=ATOL)


def test_workspace_is_affine_in_the_batch(private_cache: None) -> None:
    g = Graph("affine")
    t = g.add_input("x", dims(0, 8, 8))
    (t,) = g.add_layer("softmax", [t], {"axis": -1}, name="a")
    (t,) = g.add_layer("softmax", [t], {"axis": 1}, name="b")
    g.outputs = [t]
    compiled = compile_graph(g, passes=False)
    p = plan(g)
    for batch in (1, 5, 64):
        assert compiled.workspace_size(batch) == p.memory.workspace.at(batch) >= batch * 8 * 8 * 4


@pytest.mark.parametrize("batch", [1, 4])
def test_fused_block_matches_reference(private_cache: None, batch: int) -> None:
    g = _residual_block()
    compiled = compile_graph(g, passes=False)
    params = {n: t.data for n, t in g.params.items()}
    inputs = [_f32(batch, 4, 6, 6)]
    np.testing.assert_allclose(compiled.run_numpy(inputs, params)[0], run_reference(g, inputs, params)[0],
                               rtol=RTOL, atol=ATOL)
