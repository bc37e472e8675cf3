"""The CUDA device runtime without a GPU: a stand-in libcudart (fake_libcudart.c) and a model library with the
flavour's ABI (fake_model.c), so argument marshalling, streams, copies, errors and transparent offloading
through `OffloadedModel` run on any machine with a C compiler."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from sol.errors import SolDeviceError
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.records import Copy, Device, DevicePointer, HostBuffer
from sol.runtime import OffloadedModel
from sol_backend_cuda.backend import CudaBackend
from sol_backend_cuda.runtime import Cudart, CudaRuntime, cudart_candidates

CC = shutil.which("cc") or shutil.which("gcc")
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def fakes(tmp_path_factory) -> dict[str, Path]:
    if CC is None:
        pytest.skip("no C compiler to build the stand-in libcudart")
    out = tmp_path_factory.mktemp("fake-cudart")
    built = {}
    for name in ("fake_libcudart", "fake_model"):
        built[name] = out / f"{name}.so"
        subprocess.run([CC, "-shared", "-fPIC", "-O1", "-o", str(built[name]), str(HERE / f"{name}.c")], check=True)
    return built


@pytest.fixture
def runtime(fakes) -> CudaRuntime:
    # a fresh copy per test: a CDLL is loaded once per path, and the fake keeps counters
    cudart, reason = Cudart.load(str(fakes["fake_libcudart"]))
    assert cudart is not None, reason
    return CudaRuntime(1, cudart)


def test_runtime_sets_its_device_and_names_it(runtime):
    assert runtime.main_loop == "host" and runtime.device == "cuda:1"
    assert runtime.cudart.lib.fake_device() == 1
    assert runtime.versions()["runtime"] == "13.0"


def test_handles_are_device_addresses_and_copies_go_on_the_stream(runtime):
    lib = runtime.cudart.lib
    lib.fake_last_stream.restype = ctypes.c_void_p
    copies_before = [lib.fake_count(i) for i in (2, 3, 4)]  # the fake's counters live as long as the process
    handle = runtime.alloc(64)
    assert runtime.address(DevicePointer(handle, 16)) == handle + 16
    data = np.arange(4, dtype=np.float32)
    back = np.zeros(4, dtype=np.float32)
    runtime.copy_to_device([Copy(DevicePointer(handle, 16), data.ctypes.data, 16)], queue=0x1234)
    assert lib.fake_last_stream() == 0x1234
    runtime.copy_on_device(DevicePointer(handle, 32), DevicePointer(handle, 16), 16)
    runtime.copy_to_host([Copy(DevicePointer(handle, 32), back.ctypes.data, 16)])
    assert lib.fake_last_stream() is None, "no queue: the legacy default stream"
    runtime.synchronize()
    np.testing.assert_array_equal(back, data)
    assert [lib.fake_count(i) - before for i, before in zip((2, 3, 4), copies_before, strict=True)] == [1, 1, 1]
    runtime.free(handle)


def test_errors_name_the_device_the_call_and_cuda_s_message(runtime):
    lib = runtime.cudart.lib
    lib.fake_fail(b"cudaMalloc", 2)
    with pytest.raises(SolDeviceError, match=r"cuda:1: cudaMalloc of 1024 bytes failed: out of memory "
                                             r"\(cudaErrorMemoryAllocation 2\)"):
        runtime.alloc(1024)
    lib.fake_fail(b"cudaStreamSynchronize", 700)
    with pytest.raises(SolDeviceError, match="cuda:1: cudaStreamSynchronize.*illegal memory access"):
        runtime.synchronize(7)
    handle = runtime.alloc(8)
    lib.fake_fail(b"cudaMemcpyAsync", 700)
    with pytest.raises(SolDeviceError, match="cuda:1: cudaMemcpyAsync \\(host to device, 8 bytes\\)"):
        runtime.copy_to_device([Copy(DevicePointer(handle), np.zeros(2, np.float32).ctypes.data, 8)])
    with pytest.raises(SolDeviceError, match="not a DevicePointer"):
        runtime.launch(runtime.function(runtime.load(Path(lib._name)), "cudaSetDevice"), [1.5])


def _model_setup(runtime, fakes):
    module = runtime.load(fakes["fake_model"])
    derived = runtime.alloc(4)
    weight = runtime.alloc(4)
    runtime.copy_to_device([Copy(DevicePointer(weight), np.array([2.0], np.float32).ctypes.data, 4)])
    return module, derived, weight


def test_launch_marshals_pointers_ints_host_tables_and_appends_the_stream(runtime, fakes):
    module, derived, weight = _model_setup(runtime, fakes)
    params = (ctypes.c_uint64 * 1)(runtime.address(DevicePointer(weight)))
    prepare = runtime.function(module, "sol_m_prepare")
    assert prepare.prefix == "sol_m"
    assert runtime.launch(prepare, [DevicePointer(derived), HostBuffer(params), 1], queue=99).result() == 0
    x = runtime.alloc(2 * 16)
    y = runtime.alloc(2 * 16)
    runtime.copy_to_device([Copy(DevicePointer(x), np.arange(8, dtype=np.float32).ctypes.data, 32)])
    forward = runtime.function(module, "sol_m_forward")
    tables = [(ctypes.c_uint64 * 1)(runtime.address(DevicePointer(p))) for p in (x, weight, y)]
    launch = runtime.launch(forward, [DevicePointer(derived), *[HostBuffer(t) for t in tables],
                                      DevicePointer(runtime.alloc(32)), 2], queue=99)
    lib = module.lib
    lib.fake_seen_stream.restype = ctypes.c_void_p
    lib.fake_seen_batch.restype = ctypes.c_int64
    assert launch.result() == 0 and lib.fake_seen_stream() == 99 and lib.fake_seen_batch() == 2
    out = np.zeros(8, np.float32)
    runtime.copy_to_host([Copy(DevicePointer(y), out.ctypes.data, 32)], queue=99)
    runtime.synchronize(99)
    np.testing.assert_array_equal(out, np.arange(8, dtype=np.float32) * 2 + 3)
    # entry points without a stream keep their arguments as they are
    assert runtime.launch(runtime.function(module, "sol_m_workspace_size"), [5]).result() == 80
    assert runtime.function(module, "sol_m_workspace_size").prefix is None


def test_device_status_is_read_only_when_asked_and_raised_by_synchronize(runtime, fakes):
    module, derived, weight = _model_setup(runtime, fakes)
    lib = module.lib
    lib.fake_seen_status_stream.restype = ctypes.c_void_p
    forward = runtime.function(module, "sol_m_forward")
    buf = runtime.alloc(64)
    table = (ctypes.c_uint64 * 1)(runtime.address(DevicePointer(buf)))
    wtable = (ctypes.c_uint64 * 1)(runtime.address(DevicePointer(weight)))
    args = [DevicePointer(derived), HostBuffer(table), HostBuffer(wtable), HostBuffer(table), DevicePointer(buf), 1]
    lib.fake_set_status(1)
    launch = runtime.launch(forward, args, queue=5)
    assert launch.result() == 0, "result() is what the host function returned: no wait, no status read"
    assert lib.fake_seen_status_stream() is None or lib.fake_seen_status_stream() != 5
    with pytest.raises(SolDeviceError, match=r"cuda:1: sol_m \(fake_model.so\) reported index out of range"):
        runtime.synchronize(5)
    assert lib.fake_seen_status_stream() == 5
    runtime.synchronize(5)  # read and cleared: reported once
    launch = runtime.launch(forward, args, queue=6)
    lib.fake_set_status(1)
    assert launch.device_status() == 1
    runtime.synchronize(6)  # already read by device_status
    assert runtime.launch(forward, [*args[:-1], 5000], queue=6).result() == 2, "a failed launch: at once"


def _graph() -> Graph:
    g = Graph("m")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(4, Purpose.C)], "float32")
    g.add_param("w", np.array([2.0], np.float32))
    (r,) = g.add_layer("relu", [x], name="relu")
    g.outputs = [r]
    return g


def test_transparent_offloading_through_offloaded_model(runtime, fakes):
    lib = runtime.cudart.lib
    lib.fake_live_bytes.restype = ctypes.c_long
    before = lib.fake_live_bytes()
    model = OffloadedModel(_graph(), fakes["fake_model"], "sol_m", runtime, Device("cuda", 1, "fake", "cuda", {}))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (got,) = model.run_numpy([x], {"w": np.array([0.5], np.float32)})
    np.testing.assert_array_equal(got, x * 0.5 + 1.5)
    assert model.transfers.launches == 2 and model.transfers.to_device == 1 and model.transfers.to_host == 1
    # native: the caller's memory, parameters already on the device, the caller's stream
    w = runtime.alloc(4)
    runtime.copy_to_device([Copy(DevicePointer(w), np.array([3.0], np.float32).ctypes.data, 4)])
    model.prepare_on_device([runtime.address(DevicePointer(w))])
    xs, ys = runtime.alloc(16), runtime.alloc(16)
    runtime.copy_to_device([Copy(DevicePointer(xs), np.ones(4, np.float32).ctypes.data, 16)])
    copies = lib.fake_count(2)
    model.finish(model.run_on_device([xs], [ys], 1, queue=42))
    assert lib.fake_count(2) == copies, "run_on_device copies nothing"
    out = np.zeros(4, np.float32)
    runtime.copy_to_host([Copy(DevicePointer(ys), out.ctypes.data, 16)])
    np.testing.assert_array_equal(out, np.full(4, 3.0 + 4.0, np.float32))
    model.close()
    for handle in (w, xs, ys):
        runtime.free(handle)
    assert lib.fake_live_bytes() <= before + 64 * 8, "the model's device memory is freed by close()"


def test_backend_returns_the_runtime_or_a_clear_error(monkeypatch, fakes):
    from sol_backend_cuda import runtime as module

    monkeypatch.setattr(module, "cudart_candidates", lambda: [str(fakes["fake_libcudart"])])
    opened = CudaBackend().runtime(Device("cuda", 0, "fake", "cuda", {}))
    assert isinstance(opened, CudaRuntime) and opened.device == "cuda:0"
    monkeypatch.setattr(module, "cudart_candidates", lambda: ["/nonexistent/libcudart.so.13"])
    with pytest.raises(SolDeviceError, match="cuda:3 cannot be used: libcudart not found"):
        CudaBackend().runtime(Device("cuda", 3, "fake", "cuda", {}))


def test_cudart_search_order_puts_a_loaded_library_first(monkeypatch):
    from sol_backend_cuda import runtime as module

    monkeypatch.setattr(module, "_loaded_cudart", lambda: "/opt/torch/nvidia/cu13/lib/libcudart.so.13")
    found = cudart_candidates()
    assert found[0] == "/opt/torch/nvidia/cu13/lib/libcudart.so.13"
    assert found[-3:] == ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
