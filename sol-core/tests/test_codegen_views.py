"""Library operands read (results written) through chains of view layers (sol.codegen.views).

The strides a chain computes must say where each element really is (numpy's views are the yardstick), the chains
must stop where another reader needs a layer's result, and clustering must run the chain's layers inside the call:
no clusters, no memory for what they would have made.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
from sol.codegen.cluster import plan_programs  # noqa: E402
from sol.codegen.dnn import DnnCall, DnnCode, DnnModule  # noqa: E402
from sol.codegen.memory import plan_memory  # noqa: E402
from sol.codegen.views import View, chain_view, reshaped_strides, result_chain_view  # noqa: E402
from sol.ir import Dim, Graph, Layer, Purpose, Tensor  # noqa: E402
from sol.ir.interpret import run_reference  # noqa: E402

RNG = np.random.default_rng(3)


def _strides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


@pytest.mark.parametrize("shape,new", [((2, 3, 4), (6, 4)), ((2, 3, 4), (2, 12)), ((1, 6, 1, 4), (6, 2, 2)),
                                       ((6, 4), (1, 2, 3, 1, 4))])
def test_reshaped_strides_of_a_dense_tensor_are_numpys(shape: tuple[int, ...], new: tuple[int, ...]) -> None:
    a = np.zeros(shape, np.float32)
    got = reshaped_strides(shape, _strides(a), new)
    want = _strides(a.reshape(new))
    assert got is not None
    assert [g for g, s in zip(got, new, strict=True) if s != 1] == [w for w, s in zip(want, new, strict=True) if s != 1]


def test_a_reshape_that_merges_permuted_dims_is_no_view() -> None:
    a = np.zeros((3, 4, 5), np.float32).transpose(1, 0, 2)  # [4, 3, 5], rows of 5 not evenly spaced across 4 x 3
    assert reshaped_strides(a.shape, _strides(a), (12, 5)) is None
    assert reshaped_strides(a.shape, _strides(a), (4, 15)) is None
    assert reshaped_strides(a.shape, _strides(a), (2, 2, 3, 5)) is not None  # splitting a dim always works


def _attention_heads() -> tuple[Graph, Tensor, list[Layer]]:
    """qkv [L, 3 * H * E] -> reshape [L, 3, H * E] -> permute [3, L, H * E] -> slice 1 (k) -> reshape [L, H, E] ->
    permute [H, L, E]: the chain from the packed projection to one head-major operand."""
    g = Graph("heads")
    length, heads, width = 5, 2, 4
    qkv = g.add_input("qkv", [Dim(length, Purpose.S), Dim(3 * heads * width, Purpose.C)])
    (split,) = g.add_layer("reshape", [qkv], {"shape": (length, 3, heads * width)}, name="split")
    (packed,) = g.add_layer("permute", [split], {"perm": (1, 0, 2)}, name="packed")
    (k,) = g.add_layer("slice", [packed], {"axis": 0, "start": 1, "stop": 2, "step": 1}, name="k")
    (rows,) = g.add_layer("reshape", [k], {"shape": (length, heads, width)}, name="rows")
    (head_major,) = g.add_layer("permute", [rows], {"perm": (1, 0, 2)}, name="head_major")
    g.outputs = [head_major]
    return g, qkv, list(g.layers)


def test_a_chain_view_finds_every_element_where_numpy_has_it() -> None:
    g, qkv, layers = _attention_heads()
    data = RNG.standard_normal((5, 24)).astype(np.float32)
    want = run_reference(g, [data])[0]
    for start in range(len(layers)):  # from qkv itself, and from every tensor of the chain (dense: plain layouts)
        base = qkv if start == 0 else layers[start - 1].outputs[0]
        memory = data if start == 0 else np.ascontiguousarray(run_reference(_prefix(g, start), [data])[0])
        view = chain_view(base, layers[start:], {})
        assert view is not None
        got = np.lib.stride_tricks.as_strided(memory.reshape(-1)[view.offset:], view.shape,
                                              [s * 4 for s in view.strides])
        np.testing.assert_array_equal(got, want)


def _prefix(g: Graph, count: int) -> Graph:
    """``g`` up to (and returning the result of) its first ``count`` layers."""
    h = Graph("prefix")
    h.inputs, h.params, h.layers = g.inputs, g.params, g.layers[:count]
    h.outputs = [g.layers[count - 1].outputs[0]]
    return h


def test_a_chain_view_honours_the_base_layout() -> None:
    g, qkv, layers = _attention_heads()
    # qkv lying column-major in memory: the view of the chain's result must read it there
    view = chain_view(qkv, layers, {id(qkv): (1, 0)})
    assert view is not None
    data = RNG.standard_normal((5, 24)).astype(np.float32)
    memory = np.ascontiguousarray(data.T)
    got = np.lib.stride_tricks.as_strided(memory.reshape(-1)[view.offset:], view.shape, [s * 4 for s in view.strides])
    np.testing.assert_array_equal(got, run_reference(g, [data])[0])


def test_a_result_view_writes_what_the_chain_would_make() -> None:
    """matmul result [H, L, E] -> permute [L, H, E] -> reshape [L, H * E]: written in place of the permute's result."""
    g = Graph("back")
    x = g.add_input("x", [Dim(2, Purpose.C), Dim(5, Purpose.S), Dim(4, Purpose.C)])
    (rows,) = g.add_layer("permute", [x], {"perm": (1, 0, 2)}, name="rows")
    (flat,) = g.add_layer("reshape", [rows], {"shape": (5, 8)}, name="flat")
    g.outputs = [flat]
    view = result_chain_view(g.layers[:1], {})
    assert view is not None and view.base is rows and view.shape == (2, 5, 4)
    data = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    memory = np.zeros(40, np.float32)
    np.lib.stride_tricks.as_strided(memory, view.shape, [s * 4 for s in view.strides])[...] = data
    np.testing.assert_array_equal(memory.reshape(5, 8), run_reference(g, [data])[0])


class _ViewReadingLibrary(DnnModule):
    """Runs matmuls; reads and writes any view (what x86 checks against oneDNN's formats, this takes as it comes)."""

    name = "views"

    def accepts(self, layer: Layer) -> bool:
        return layer.op == "matmul"

    def fuses(self, call: DnnCall, value: Tensor, layer: Layer) -> bool:
        return False

    def reads_view(self, layer: Layer, index: int, view: View) -> bool:
        return True

    def writes_view(self, layer: Layer, view: View) -> bool:
        return True

    def render(self, call: DnnCall, forward: object, prepare: object) -> DnnCode:
        return DnnCode()


def _projected_attention() -> Graph:
    """One head pair's products of an attention over a packed projection, with the head permutes around them."""
    g = Graph("projected")
    length, heads, width = 5, 2, 4
    qkv = g.add_input("qkv", [Dim(length, Purpose.S), Dim(3 * heads * width, Purpose.C)])
    (split,) = g.add_layer("reshape", [qkv], {"shape": (length, 3, heads * width)}, name="split")
    (packed,) = g.add_layer("permute", [split], {"perm": (1, 0, 2)}, name="packed")  # read by three slices
    parts = []
    for i, name in enumerate("qkv"):
        (part,) = g.add_layer("slice", [packed], {"axis": 0, "start": i, "stop": i + 1, "step": 1}, name=name)
        (rows,) = g.add_layer("reshape", [part], {"shape": (length, heads, width)}, name=f"{name}.rows")
        (heads_first,) = g.add_layer("permute", [rows], {"perm": (1, 0, 2)}, name=f"{name}.heads")
        parts.append(heads_first)
    q, k, v = parts
    (scores,) = g.add_layer("matmul", [q, k], {"transpose_b": True}, name="scores")
    (weights,) = g.add_layer("softmax", [scores], {"axis": 2}, name="weights")
    (out,) = g.add_layer("matmul", [weights, v], name="out")
    (back,) = g.add_layer("permute", [out], {"perm": (1, 0, 2)}, name="back")
    (flat,) = g.add_layer("reshape", [back], {"shape": (length, heads * width)}, name="flat")
    (y,) = g.add_layer("exp", [flat], name="after")
    g.outputs = [y]
    return g


def test_view_layers_run_inside_the_calls_and_get_no_memory() -> None:
    g = _projected_attention()
    programs = plan_programs(g, _ViewReadingLibrary())
    titles = [[layer.name for layer in c.layers] for c in programs.main if not c.alias]
    # the packed permute has three readers: it stays, and each chain starts at its result
    assert titles == [["packed"], ["q", "q.rows", "q.heads", "k", "k.rows", "k.heads", "scores"], ["weights"],
                      ["v", "v.rows", "v.heads", "out", "back"], ["after"]]
    by_name = {c.anchor.name: c for c in programs.main}
    scores, out = by_name["scores"].dnn, by_name["out"].dnn
    assert scores is not None and out is not None
    packed = next(layer for layer in g.layers if layer.name == "packed").outputs[0]
    assert scores.views[0].base is packed and scores.views[1].base is packed and scores.views[1].offset == 5 * 8
    assert 0 not in out.views and out.views[1].base is packed and out.views[1].offset == 2 * 5 * 8
    back = next(layer for layer in g.layers if layer.name == "back").outputs[0]
    assert out.result_view is not None and out.output is back
    memory = plan_memory(programs, g.inputs, list(g.params.values()))
    inside = [layer.outputs[0] for layer in g.layers if layer.name in ("q", "q.rows", "q.heads", "k.heads", "v.heads")]
    assert all(memory.of(t) is None for t in inside) and memory.of(out.anchor.outputs[0]) is None
    assert memory.of(packed) is not None and memory.of(back) is not None


def test_a_chain_whose_result_has_another_reader_stays() -> None:
    g = _projected_attention()
    k_heads = next(layer for layer in g.layers if layer.name == "k.heads").outputs[0]
    (extra,) = g.add_layer("exp", [k_heads], name="extra")
    g.outputs = [*g.outputs, extra]
    programs = plan_programs(g, _ViewReadingLibrary())
    scores = next(c for c in programs.main if c.anchor.name == "scores").dnn
    assert scores is not None and 1 not in scores.views  # k's heads are materialised for the other reader
    assert any(c.anchor.name == "k.heads" for c in programs.main)
