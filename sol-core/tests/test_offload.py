"""Transparent offloading (sol.runtime.offload) on the loopback device runtime of sol.testing.

A backend with a `DeviceRuntime` gets `OffloadedModel`s from compile_graph:
parameters uploaded by prepare only, per call inputs and outputs only, one
launch per call, device memory freed, errors naming the device.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
from _codegen_helpers import dims, private_cache  # noqa: E402
from sol.compiler import compile_graph  # noqa: E402
from sol.errors import SolDeviceError  # noqa: E402
from sol.ir import Graph  # noqa: E402
from sol.ir.interpret import run_reference  # noqa: E402
from sol.records import Copy, DevicePointer  # noqa: E402
from sol.runtime import OffloadedModel  # noqa: E402
from sol.testing.loopback import LoopbackRuntime, loopback_device  # noqa: E402

__all__ = ["private_cache"]
pytestmark = pytest.mark.usefixtures("private_cache")

@pytest.fixture
def loop():
    with loopback_device() as backend:
        yield backend


def _graph() -> tuple[Graph, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    g = Graph("offloaded")
    x = g.add_input("x", dims(0, 3, 8, 8), "float32")
    params = {"conv.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
              "conv.bias": rng.standard_normal(4).astype(np.float32)}
    w = g.add_param("conv.weight", params["conv.weight"])
    b = g.add_param("conv.bias", params["conv.bias"])
    (c,) = g.add_layer("conv", [x, w, b], {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1},
                       name="conv")
    (r,) = g.add_layer("relu", [c], name="relu")
    (p,) = g.add_layer("avg_pool", [r], {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0), "ceil_mode": False,
                                        "count_include_pad": False, "divisor_override": None}, name="pool")
    g.outputs = [p]
    return g, params


def test_a_backend_with_a_runtime_gets_offloaded_models_that_match_the_reference(loop) -> None:
    graph, params = _graph()
    model = compile_graph(graph, "loop:0")
    assert isinstance(model, OffloadedModel)
    runtime = loop.runtimes[0]
    for batch in (2, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        (got,) = model.run_numpy([x], params)
        (want,) = run_reference(graph, [x], params)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert runtime.used > 0
    model.close()
    assert runtime.used == 0, "closing the model frees its device memory"


def test_parameters_travel_once_and_calls_move_only_inputs_and_outputs(loop) -> None:
    graph, params = _graph()
    model = compile_graph(graph, "loop:0")
    names = model.param_names
    arrays = [np.ascontiguousarray(params[n]) for n in names]
    pointers = [a.ctypes.data for a in arrays]
    model.prepare(pointers)
    before = model.transfers.copy()
    x = np.ones((2, 3, 8, 8), np.float32)
    out = np.empty(model.output_shapes(2)[0], np.float32)
    for _ in range(3):
        model.run([x.ctypes.data], pointers, [out.ctypes.data], 2)
    spent = model.transfers.since(before)
    assert (spent.calls, spent.to_device, spent.to_host, spent.parameters, spent.launches) == (3, 3, 3, 0, 3)
    assert spent.to_device_bytes == 3 * x.nbytes and spent.to_host_bytes == 3 * out.nbytes
    assert before.parameters == len(names)


def test_device_errors_name_the_device(loop) -> None:
    runtime = LoopbackRuntime("loop:7", capacity=1024)
    with pytest.raises(SolDeviceError, match=r"loop:7: out of device memory"):
        runtime.alloc(4096)
    host = np.zeros(4, np.float32)
    with pytest.raises(SolDeviceError, match=r"loop:7: .* is not device memory of loop:7 \(a host pointer"):
        runtime.copy_to_device([Copy(DevicePointer(host.ctypes.data), host.ctypes.data, 16)])
    handle = runtime.alloc(16)
    runtime.free(handle)
    with pytest.raises(SolDeviceError, match="not device memory"):
        runtime.address(DevicePointer(handle))


def test_run_on_device_uses_the_callers_memory_without_copies(loop) -> None:
    graph, params = _graph()
    model = compile_graph(graph, "loop:0")
    runtime = loop.runtimes[0]
    model.prepare([np.ascontiguousarray(params[n]).ctypes.data for n in model.param_names])
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    out = np.empty(model.output_shapes(2)[0], np.float32)
    src, dst = runtime.alloc(x.nbytes), runtime.alloc(out.nbytes)
    runtime.copy_to_device([Copy(DevicePointer(src), x.ctypes.data, x.nbytes)])
    before = model.transfers.copy()
    launch = model.run_on_device([runtime.address(DevicePointer(src))], [runtime.address(DevicePointer(dst))], 2)
    assert launch.result() == 0
    runtime.copy_to_host([Copy(DevicePointer(dst), out.ctypes.data, out.nbytes)])
    runtime.synchronize()
    spent = model.transfers.since(before)
    assert (spent.to_device, spent.to_host, spent.launches) == (0, 0, 1)
    np.testing.assert_allclose(out, run_reference(graph, [x], params)[0], rtol=1e-5, atol=1e-5)


def test_profile_counters_come_back_from_the_device(loop) -> None:
    import sol

    graph, params = _graph()
    sol.config["compiler::profile"] = True
    try:
        model = compile_graph(graph, "loop:0")
    finally:
        sol.config["compiler::profile"] = False
    model.run_numpy([np.ones((2, 3, 8, 8), np.float32)], params)
    times = model.profile()
    assert times and all(seconds >= 0 for _, seconds in times) and sum(s for _, s in times) > 0


def test_host_buffer_results_copy_back(loop) -> None:
    runtime = LoopbackRuntime("loop:1")
    libc = ctypes.CDLL(None)
    fn = runtime.function(libc, "memset")
    from sol.records import HostBuffer

    data = (ctypes.c_uint8 * 8)()
    runtime.launch(fn, [HostBuffer(data, copy_back=True), 7, 8]).result()
    assert list(data) == [7] * 8
