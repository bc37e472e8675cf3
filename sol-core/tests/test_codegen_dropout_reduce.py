"""The two training kernels with fast paths of their own: dropout_train (Philox, four draws per call)
and the reductions over outer axes (a kept dim innermost in memory), against the numpy references.

The fast paths depend on the shapes (rows of the last dim not a multiple of the four draws of a
Philox call, spanning several batches of counters), on the memory layout (channels-last
tensors take other loops) and must not depend on the thread count; each is covered here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
from _codegen_helpers import CaseGraph, check, private_cache, run_cases  # noqa: E402
from sol.compiler import compile_graph  # noqa: E402
from sol.ir import Dim, Purpose, Tensor  # noqa: E402
from sol.ir.interpret import run_reference  # noqa: E402
from sol.ir.ops.dropout_train import draws, keep_mask, philox  # noqa: E402

__all__ = ["private_cache"]

pytestmark = pytest.mark.usefixtures("private_cache")
NHWC = (0, 2, 3, 1)


# -- the mask stream ----------------------------------------------------------------------------
def test_philox_known_answers() -> None:
    """Random123's Philox-4x32-10 test vectors (counter (c0..c3), key (k0, k1) -> four words)."""
    words = philox(0, 0, 0, np.zeros(1, np.uint64))
    assert [int(w[0]) for w in words] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    counter = np.array([(0x85A308D3 << 32) | 0x243F6A88], np.uint64)
    words = philox((0x299F31D0 << 32) | 0xA4093822, 0x13198A2E, 0x03707344, counter)
    assert [int(w[0]) for w in words] == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_four_draws_per_counter() -> None:
    index = np.arange(23, dtype=np.uint64)
    words = philox(7, 3, 2, index // np.uint64(4))
    expected = [int(words[i % 4][i]) for i in range(23)]
    assert [int(v) for v in draws(7, 3, 2, index)] == expected


def test_per_channel_mask_is_one_draw_per_plane() -> None:
    key = np.array([5, 9], np.int64)
    attrs = {"p": 0.5, "stream": 4, "per_channel": True}
    mask = keep_mask((3, 5, 2, 2), key, attrs)
    planes = keep_mask((3, 5), key, {**attrs, "per_channel": False})
    np.testing.assert_array_equal(mask, np.broadcast_to(planes[:, :, None, None], (3, 5, 2, 2)))


# -- generated code against the references ------------------------------------------------------
def _key(cg: CaseGraph, seed: int = -98765432123, step: int = 11) -> Tensor:
    """The (seed, step) input, not batched; the default seed is negative: all 64 bits matter."""
    key = cg.graph.add_input("key", [Dim(2, Purpose.C)], "int64")
    cg.feeds.append(lambda batch, rng: np.array([seed, step], dtype=np.int64))
    return key


def _dropout_graph() -> CaseGraph:
    cg = CaseGraph("dropout_rows")
    key = _key(cg)
    cases = {"odd": (0, 5, 7), "single": (0, 3, 1), "groups": (0, 2, 131), "planes": (0, 3, 5, 6), "vector": (0,)}
    for name, shape in cases.items():
        x = cg.input(f"x_{name}", shape)
        cg.case(name, "dropout_train", [x, key], {"p": 0.3, "stream": len(cg.cases) + 1, "per_channel": False})
    x = cg.input("x_f64", (0, 3, 67), "float64")
    cg.case("f64", "dropout_train", [x, key], {"p": 0.6, "stream": 9, "per_channel": False})
    x = cg.input("x_channels", (0, 3, 5, 6))
    cg.case("per_channel", "dropout_train", [x, key], {"p": 0.5, "stream": 10, "per_channel": True})
    # stochastic depth's bernoulli_ keep mask: kept elements stay as they are (no 1 / (1 - p))
    x = cg.input("x_unscaled", (0, 1, 1, 1))
    cg.case("unscaled", "dropout_train", [x, key], {"p": 0.25, "stream": 11, "per_channel": False, "unscaled": True})
    return cg


def _exact(results: dict, case: str) -> None:  # type: ignore[type-arg]
    for batch, res in results.items():
        got, expected = res.cases[case]
        np.testing.assert_array_equal(got, expected, err_msg=f"{case} at batch {batch}")


def test_dropout_matches_reference_bit_for_bit() -> None:
    cg = _dropout_graph()
    results = run_cases(cg, batches=(1, 3))
    for case in cg.cases:
        _exact(results, case)
    for case in ("odd", "groups", "f64", "per_channel"):
        got, _ = results[3].cases[case]
        assert 0 < np.count_nonzero(got) < got.size, f"{case}: a mask that keeps all or nothing"


def test_unscaled_mask_keeps_values_as_they_are() -> None:
    """Stochastic depth's keep mask (``unscaled``): each element is 0 or its input, kept with probability 1 - p."""
    from sol.ir.ops.dropout_train import DropoutTrain

    x = np.full((4000, 1, 1, 1), 3.0, np.float32)
    attrs = {"p": 0.25, "stream": 3, "per_channel": False, "unscaled": True}
    (y,) = DropoutTrain.reference([x, np.array([5, 1])], attrs)
    assert set(np.unique(y)) == {0.0, 3.0}
    assert abs((y != 0).mean() - 0.75) < 0.03
    np.testing.assert_array_equal(y != 0, keep_mask(x.shape, np.array([5, 1]), attrs))


def test_dropout_without_avx2_matches_reference() -> None:
    """The portable Philox (arm64, x86 without AVX2) draws the same numbers as the AVX2 one."""
    import sol

    before = sol.config["compiler::cflags"]
    sol.config["compiler::cflags"] = "-O2 -fopenmp"  # no -march: baseline x86-64 has no AVX2
    try:
        cg = _dropout_graph()
        cg.graph.name = "dropout_portable"
        results = run_cases(cg, batches=(3,))
    finally:
        sol.config["compiler::cflags"] = before
    for case in cg.cases:
        _exact(results, case)


def _reduce_graph() -> CaseGraph:
    cg = CaseGraph("reduce_outer")
    x = cg.input("x", (0, 5, 7, 67))
    xi = cg.input("xi", (0, 5, 7, 67), "int32", make=lambda s, r: r.integers(-50, 50, s))
    x2 = cg.input("x2", (0, 130), "float64")
    x1 = cg.input("x1", (0, 5, 7, 1))  # a unit innermost dim: dim 2 has the unit stride
    for op in ("reduce_sum", "reduce_mean", "reduce_max"):
        cg.case(f"{op}_batch", op, [x], {"axes": (0,), "keepdims": False})
        cg.case(f"{op}_leading", op, [x], {"axes": (0, 1, 2), "keepdims": False})
        cg.case(f"{op}_middle", op, [x], {"axes": (1,), "keepdims": False})
        cg.case(f"{op}_split_keepdims", op, [x], {"axes": (0, 2), "keepdims": True})
        cg.case(f"{op}_int", op, [xi], {"axes": (0, 1), "keepdims": False})
        cg.case(f"{op}_f64", op, [x2], {"axes": (0,), "keepdims": True})
        cg.case(f"{op}_unit_kept", op, [x1], {"axes": (0, 1), "keepdims": True})
        cg.case(f"{op}_unit_reduced", op, [x1], {"axes": (0, 3), "keepdims": False})
    return cg


def test_reductions_over_outer_axes() -> None:
    cg = _reduce_graph()
    results = run_cases(cg, batches=(1, 3))
    for case in cg.cases:
        check(results, case)


def test_long_float_sums_stay_accurate() -> None:
    """Many rows of floats summed per column: double accumulators, as the reference."""
    cg = CaseGraph("reduce_long")
    x = cg.input("x", (0, 20000, 3), make=lambda s, r: r.uniform(0.0, 1.0, s) + 1000.0)
    cg.case("sum", "reduce_sum", [x], {"axes": (0, 1), "keepdims": False})
    results = run_cases(cg, batches=(2,))
    got, expected = results[2].cases["sum"]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


# -- channels-last tensors ----------------------------------------------------------------------
@contextmanager
def _layouts(orders: dict[str, tuple[int, ...]]) -> Iterator[None]:
    """Compile with the named tensors in the given memory orders (as a library call would leave them)."""
    import sol.codegen.cluster as cluster

    original = cluster.plan_layouts

    def planned(*args, **kwargs):  # type: ignore[no-untyped-def]
        layers, layouts = original(*args, **kwargs)
        for layer in layers:
            for t in [*layer.inputs, *layer.outputs]:
                if t.name in orders:
                    layouts[id(t)] = orders[t.name]
        return layers, layouts

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cluster, "plan_layouts", planned)
        yield


def _nhwc(a: np.ndarray) -> np.ndarray:
    """NHWC data in a buffer of the logical NCHW shape (what a channels-last tensor's pointer holds)."""
    return np.ascontiguousarray(a.transpose(NHWC)).reshape(a.shape)


def _from_nhwc(a: np.ndarray) -> np.ndarray:
    """An NCHW-shaped buffer that holds NHWC data, as the logical NCHW array."""
    n, c, h, w = a.shape
    return a.reshape(n, h, w, c).transpose(0, 3, 1, 2)


def test_reductions_of_channels_last_tensors() -> None:
    cg = CaseGraph("reduce_channels_last")
    x = cg.input("x", (0, 6, 5, 67))
    cg.case("bias_grad", "reduce_sum", [x], {"axes": (0, 2, 3), "keepdims": False})
    cg.case("spatial_mean", "reduce_mean", [x], {"axes": (2, 3), "keepdims": True})
    cg.case("channel_max", "reduce_max", [x], {"axes": (1,), "keepdims": False})
    with _layouts({"x": NHWC}):
        compiled = compile_graph(cg.graph, passes=False)
    data = np.random.default_rng(3).standard_normal((3, 6, 5, 67)).astype(np.float32)
    got = compiled.run_numpy([_nhwc(data)], {})
    expected = run_reference(cg.graph, [data], {})
    for name, g, e in zip(cg.cases, got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("per_channel", [False, True])
def test_dropout_of_channels_last_tensors(per_channel: bool) -> None:
    cg = CaseGraph(f"dropout_channels_last_{int(per_channel)}")
    x = cg.input("x", (0, 6, 5, 7))
    key = _key(cg, 12345, 6)
    (y,) = cg.case("y", "dropout_train", [x, key], {"p": 0.4, "stream": 2, "per_channel": per_channel})
    with _layouts({"x": NHWC, y.name: NHWC}):
        compiled = compile_graph(cg.graph, passes=False)
    data = np.random.default_rng(4).standard_normal((3, 6, 5, 7)).astype(np.float32)
    key_data = cg.feeds[1](3, np.random.default_rng(0))
    (got,) = compiled.run_numpy([_nhwc(data), key_data], {})
    (expected,) = run_reference(cg.graph, [data, key_data], {})
    np.testing.assert_array_equal(_from_nhwc(got), expected)


# -- thread count -------------------------------------------------------------------------------
@contextmanager
def _threads(count: int) -> Iterator[None]:
    """OpenMP's thread count for the parallel regions this thread starts (libgomp's ICV)."""
    name = ctypes.util.find_library("gomp")
    if name is None:
        pytest.skip("libgomp not found")
    gomp = ctypes.CDLL(name)
    before = gomp.omp_get_max_threads()
    gomp.omp_set_num_threads(count)
    try:
        yield
    finally:
        gomp.omp_set_num_threads(before)


def test_results_do_not_depend_on_the_thread_count() -> None:
    cg = CaseGraph("threads")
    x = cg.input("x", (0, 37, 131))
    key = _key(cg)
    cg.case("dropout", "dropout_train", [x, key], {"p": 0.5, "stream": 1, "per_channel": False})
    cg.case("sum", "reduce_sum", [x], {"axes": (0, 1), "keepdims": False})
    compiled = compile_graph(cg.graph, passes=False)
    rng = np.random.default_rng(5)
    inputs = [feed(4, rng) for feed in cg.feeds]
    runs = []
    for count in (1, 2, 3):
        with _threads(count):
            runs.append(compiled.run_numpy(inputs, {}))
    for other in runs[1:]:
        for a, b in zip(runs[0], other, strict=True):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(runs[0][0], run_reference(cg.graph, inputs, {})[0])
