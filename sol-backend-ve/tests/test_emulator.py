"""The emulated VE (SOL_VE_EMULATE=1) through SOL's real VEDA binding.

Runs wherever g++ is (CI included): the emulator is built into the cache on first use.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from sol.errors import SolDeviceError
from sol_backend_ve import emulator
from sol_backend_ve.veda import Arg, open_veda

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulated VE needs g++")

KERNELS = r"""
#include <stdint.h>
#include <unistd.h>
#include "vednn.h"

extern "C" {

// x[i] = x[i] * params[0] + io[0]; out = {n, params[1]}; io[0] += 1
uint64_t scale(float* x, int64_t n, const int64_t* params, int64_t* out, int64_t* io) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * params[0] + io[0];
    out[0] = n;
    out[1] = params[1];
    io[0] += 1;
    return 1000 + n;
}

// Sums the first float behind each raw pointer of a table in device memory.
uint64_t sum_table(const uint64_t* table, int64_t n) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += *(const float*)table[i];
    return (uint64_t)sum;
}

uint64_t deref(const uint64_t* table) { return *(const uint64_t*)table[0]; }

uint64_t sleep_ms(int64_t ms) {
    usleep(ms * 1000);
    return ms;
}

uint64_t linear(const float* x, const float* w, float* y, int64_t in, int64_t out, int64_t batch) {
    return vednnLinearForward(in, out, batch, x, w, y);
}
}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("ve-kernels") / "kernels.cpp"
    src.write_text(KERNELS)
    return emulator.compile_module([src], src.with_suffix(".so"))


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setenv("SOL_VE_EMULATE", "1")
    opened = []

    def open_(memory: str | None = None):
        if memory is not None:
            monkeypatch.setenv("SOL_VE_EMULATE_MEMORY", memory)
        v, reason = open_veda()
        assert v is not None, reason
        opened.append(v)
        return v

    yield open_
    for v in opened:
        v.close()


@pytest.fixture
def dev(emulated):
    return emulated().device(0)


def test_open_veda_reports_the_emulated_device(emulated, monkeypatch):
    monkeypatch.delenv("SOL_VE_EMULATE_MEMORY", raising=False)
    v = emulated()
    assert v.emulated and v.device_count() == 1
    props = v.device(0).properties()
    assert props == {"name": "NEC SX-Aurora VE (emulated)", "cores": 8, "memory": 8 << 30, "emulated": True}
    _, reason = open_veda()
    assert "[emulated]" in reason


def test_round_trip_with_offsets(dev):
    x = np.arange(1000, dtype=np.float32)
    p = dev.alloc(x.nbytes)
    dev.copy_to_device(p, x, x.nbytes)
    dev.copy_to_device(p + 40, np.full(5, -1, np.float32), 20)  # vptr arithmetic, as in VEDA
    y = np.empty_like(x)
    dev.copy_to_host(y, p, y.nbytes)
    part = np.empty(3, np.float32)
    dev.copy_to_host(part, p + 36, 12)
    dev.synchronize()
    expected = x.copy()
    expected[10:15] = -1
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(part, [9, -1, -1])
    dev.free(p)
    dev.synchronize()


def test_device_to_device_and_ordering(dev):
    a, b = dev.alloc(64), dev.alloc(64)
    first, second = np.arange(16, dtype=np.int32), np.arange(16, 32, dtype=np.int32)
    out_a, out_b = np.zeros(16, np.int32), np.zeros(16, np.int32)
    # Queued back to back: each must see the previous one's effect.
    dev.copy_to_device(a, first, 64)
    dev.copy_on_device(b, a, 64)
    dev.copy_to_device(a, second, 64)
    dev.copy_to_host(out_b, b, 64)
    dev.copy_to_host(out_a, a, 64)
    dev.synchronize()
    np.testing.assert_array_equal(out_b, first)
    np.testing.assert_array_equal(out_a, second)


def test_queue_is_asynchronous(dev, kernels):
    fn = dev.load_module(kernels).function("sleep_ms")
    started = time.perf_counter()
    pending = dev.launch(fn, [Arg.i64(300)])
    queued = time.perf_counter() - started
    assert pending.result() == 300
    assert queued < 0.15 < time.perf_counter() - started


def test_launch_with_vptr_integer_and_stack_args(dev, kernels):
    fn = dev.load_module(kernels).function("scale")
    x = np.arange(8, dtype=np.float32)
    p = dev.alloc(x.nbytes)
    dev.copy_to_device(p, x, x.nbytes)
    params = np.array([3, 77], np.int64)
    out = np.zeros(2, np.int64)
    io = np.array([10], np.int64)
    pending = dev.launch(
        fn, [Arg.vptr(p), Arg.i64(8), Arg.stack(params), Arg.stack(out, "out"), Arg.stack(io, "inout")]
    )
    assert pending.result() == 1008
    assert out.tolist() == [8, 77] and io.tolist() == [11]
    y = np.empty_like(x)
    dev.copy_to_host(y, p, y.nbytes)
    dev.synchronize()
    np.testing.assert_array_equal(y, x * 3 + 10)
    assert dev.stats.launches == 1


def test_pointer_table_of_raw_device_addresses(dev, kernels):
    fn = dev.load_module(kernels).function("sum_table")
    ptrs = [dev.alloc(4) for _ in range(3)]
    for i, p in enumerate(ptrs):
        dev.copy_to_device(p, np.array([i + 1], np.float32), 4)
    table = np.array([dev.raw_pointer(p) for p in ptrs], np.uint64)
    assert all(t > 0 for t in table)
    t = dev.alloc(table.nbytes)
    dev.copy_to_device(t, table, table.nbytes)
    assert dev.launch(fn, [Arg.vptr(t), Arg.i64(3)]).result() == 6


def test_out_of_memory(emulated):
    dev = emulated(memory="1M").device(0)
    assert dev.total_memory == 1 << 20
    p = dev.alloc(768 << 10)
    with pytest.raises(SolDeviceError) as info:
        dev.alloc(512 << 10)
    text = str(info.value)
    assert "ve:0 (emulated): vedaMemAllocAsync" in text and "VEDA_ERROR_OUT_OF_MEMORY" in text
    assert "free tensors or use a smaller batch" in text and "SOL_VE_EMULATE_MEMORY" in text
    dev.free(p)
    dev.free(dev.alloc(1 << 20))  # freed memory is available again
    dev.synchronize()


def test_unknown_and_freed_vptr_fail_at_launch(dev, kernels):
    fn = dev.load_module(kernels).function("sum_table")
    p = dev.alloc(16)
    dev.free(p)
    with pytest.raises(SolDeviceError, match="vedaLaunchKernelEx .*VEDA_ERROR_UNKNOWN_VPTR.*not a live allocation"):
        dev.launch(fn, [Arg.vptr(p), Arg.i64(0)])
    with pytest.raises(SolDeviceError, match="VEDA_ERROR_UNKNOWN_VPTR"):
        dev.launch(fn, [Arg.vptr(77 << 37), Arg.i64(0)])
    with pytest.raises(SolDeviceError, match="VEDA_ERROR_OUT_OF_BOUNDS"):
        q = dev.alloc(16)
        dev.copy_to_device(q, bytes(32), 32)
    dev.synchronize()  # the device is still fine


def test_module_and_function_errors(dev, kernels, tmp_path):
    with pytest.raises(SolDeviceError, match="vedaModuleLoad .*VEDA_ERROR_MODULE_NOT_FOUND"):
        dev.load_module(tmp_path / "missing.so")
    with pytest.raises(SolDeviceError, match="VEDA_ERROR_FUNCTION_NOT_FOUND.*extern"):
        dev.load_module(kernels).function("no_such_kernel")


def test_server_is_a_separate_exec_d_process(emulated):
    v = emulated()
    dev = v.device(0)
    dev.free(dev.alloc(8))  # a round trip: the server answers only after its exec (before, /proc says python)
    dev.synchronize()
    pid = ctypes.c_int()
    v.lib.solVedaEmuServerPid(ctypes.byref(pid))
    assert pid.value > 0 and pid.value != os.getpid()
    # exec'd (its own program), not a fork of this Python sharing its memory image
    assert Path(f"/proc/{pid.value}/exe").resolve() == emulator.build().server.resolve()
    assert Path(f"/proc/{pid.value}/exe").resolve() != Path(f"/proc/{os.getpid()}/exe").resolve()


def test_host_pointer_in_kernel_fails_loudly_and_loses_the_device(emulated, kernels):
    v = emulated()
    dev = v.device(0)
    fn = dev.load_module(kernels).function("deref")
    host = np.array([12345], np.uint64)  # valid here, meaningless on the device
    table = dev.alloc(8)
    dev.copy_to_device(table, np.array([host.ctypes.data], np.uint64), 8)
    with pytest.raises(SolDeviceError) as info:
        dev.launch(fn, [Arg.vptr(table)]).result()
    text = str(info.value)
    assert f"kernel deref accessed address {host.ctypes.data:#x} which is not memory of the emulated ve:0" in text
    assert text.startswith("ve:0 (emulated): vedaStreamSynchronize") and "VEDA_ERROR_VEO_COMMAND_EXCEPTION" in text
    for later in (lambda: dev.alloc(8), dev.synchronize, lambda: dev.copy_to_device(table, host, 8)):
        with pytest.raises(SolDeviceError, match="kernel deref accessed address"):
            later()
    v.close()
    fresh = emulated().device(0)  # a new emulated VE
    fresh.free(fresh.alloc(8))
    fresh.synchronize()


def test_grouped_copies_make_one_transfer_per_run(dev):
    parts = [np.full(k + 1, k, np.float32) for k in range(10)]
    total = sum(p.nbytes for p in parts)
    p = dev.alloc(total)
    offsets = np.cumsum([0] + [q.nbytes for q in parts[:-1]])
    dev.stats.reset()
    assert (
        dev.copy_group_to_device([(p + int(o), q.ctypes.data, q.nbytes) for o, q in zip(offsets, parts, strict=True)])
        == 1
    )
    assert (dev.stats.htod_transfers, dev.stats.htod_bytes) == (1, total)
    back = [np.zeros_like(q) for q in parts]
    assert (
        dev.copy_group_to_host([(p + int(o), b.ctypes.data, b.nbytes) for o, b in zip(offsets, back, strict=True)]) == 1
    )
    dev.synchronize()  # unpacks
    assert (dev.stats.dtoh_transfers, dev.stats.dtoh_bytes) == (1, total)
    for q, b in zip(parts, back, strict=True):
        np.testing.assert_array_equal(q, b)
    # separate allocations cannot be packed
    a, b = dev.alloc(4), dev.alloc(4)
    dev.stats.reset()
    dev.copy_group_to_device([(a, parts[0].ctypes.data, 4), (b, parts[1].ctypes.data, 4)])
    dev.synchronize()
    assert dev.stats.transfers == 2


def test_kernel_module_calls_emulated_vednn(dev, kernels):
    fn = dev.load_module(kernels).function("linear")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 5), np.float32), rng.standard_normal((5, 4), np.float32)
    px, pw, py = dev.alloc(x.nbytes), dev.alloc(w.nbytes), dev.alloc(3 * 4 * 4)
    dev.copy_to_device(px, x, x.nbytes)
    dev.copy_to_device(pw, w, w.nbytes)
    assert dev.launch(fn, [Arg.vptr(px), Arg.vptr(pw), Arg.vptr(py), Arg.i64(5), Arg.i64(4), Arg.i64(3)]).result() == 0
    y = np.empty((3, 4), np.float32)
    dev.copy_to_host(y, py, y.nbytes)
    dev.synchronize()
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_cache_root_and_module_flags(monkeypatch, tmp_path):
    built = emulator.build()
    flags = emulator.module_flags(built)
    assert f"-L{built.root}" in flags and "-lvednn" in flags and f"-I{emulator.vednn_include_dir()}" in flags
    assert (emulator.vednn_include_dir() / "vednn.h").is_file()
    assert built.root.parent.name == "ve-emulator"
    include_dirs, link_flags = emulator.build_extras()
    assert include_dirs == [str(emulator.vednn_include_dir())] and "-lvednn" in link_flags
    monkeypatch.setenv("SOL_CACHE_DIR", str(tmp_path))
    assert emulator._cache_root() == tmp_path


# -- vednn's loops against numpy ------------------------------------------------------


class TensorParam(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("batch", ctypes.c_int),
        ("channel", ctypes.c_int),
        ("width", ctypes.c_int),
        ("height", ctypes.c_int),
    ]


class FilterParam(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("layout", ctypes.c_int),
        ("inChannel", ctypes.c_int),
        ("outChannel", ctypes.c_int),
        ("width", ctypes.c_int),
        ("height", ctypes.c_int),
    ]


class BiasParam(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("channel", ctypes.c_int)]


class ConvParam(ctypes.Structure):
    _fields_ = [
        ("group", ctypes.c_int),
        ("strideWidth", ctypes.c_int),
        ("strideHeight", ctypes.c_int),
        ("padWidth", ctypes.c_int),
        ("padHeight", ctypes.c_int),
        ("dilationWidth", ctypes.c_int),
        ("dilationHeight", ctypes.c_int),
    ]


@pytest.fixture(scope="module")
def vednn():
    lib = ctypes.CDLL(str(emulator.build().libvednn))
    for name in ("vednnLinearForward", "vednnLinearBackwardData", "vednnLinearBackwardWeight"):
        getattr(lib, name).argtypes = [ctypes.c_ulong] * 3 + [ctypes.c_void_p] * 3
    return lib


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def _taps(x, ky, kx, geometry):
    """The input values tap (ky, kx) meets for every output pixel: [N, C, OH, OW]."""
    (sh, sw), (ph, pw), (dh, dw), (oh, ow) = geometry
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    return xp[:, :, ky * dh : ky * dh + sh * (oh - 1) + 1 : sh, kx * dw : kx * dw + sw * (ow - 1) + 1 : sw]


def _conv_ref(x, w, groups, geometry):
    n, o, (oh, ow) = x.shape[0], w.shape[0], geometry[3]
    cg, og = w.shape[1], o // groups
    out = np.zeros((n, o, oh, ow))
    for g in range(groups):
        for ky in range(w.shape[2]):
            for kx in range(w.shape[3]):
                patch = _taps(x[:, g * cg : (g + 1) * cg], ky, kx, geometry)
                out[:, g * og : (g + 1) * og] += np.einsum("ncyx,oc->noyx", patch, w[g * og : (g + 1) * og, :, ky, kx])
    return out


CASES = [  # N, C, H, W, O, KH, KW, groups, stride, pad, dilation
    (2, 3, 7, 6, 4, 3, 3, 1, (1, 1), (1, 1), (1, 1)),
    (1, 4, 9, 8, 6, 3, 2, 2, (2, 1), (1, 0), (1, 2)),
    (2, 6, 8, 8, 6, 3, 3, 6, (2, 2), (2, 1), (2, 1)),  # depthwise
    (1, 2, 5, 5, 3, 1, 1, 1, (1, 1), (0, 0), (1, 1)),
]


@pytest.mark.parametrize("case", CASES)
def test_vednn_convolutions_match_numpy(vednn, case):
    n, c, h, w_, o, kh, kw, groups, stride, pad, dil = case
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w_ + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    geometry = (stride, pad, dil, (oh, ow))
    rng = np.random.default_rng(sum(case[:7]))
    x = rng.standard_normal((n, c, h, w_)).astype(np.float32)
    w = rng.standard_normal((o, c // groups, kh, kw)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    gout = rng.standard_normal((n, o, oh, ow)).astype(np.float32)
    p_in, p_out = TensorParam(0, n, c, w_, h), TensorParam(0, n, o, ow, oh)
    p_filter = FilterParam(0, 0, c // groups, o // groups, kw, kh)
    p_conv = ConvParam(groups, stride[1], stride[0], pad[1], pad[0], dil[1], dil[0])
    ref = _conv_ref(x.astype(np.float64), w.astype(np.float64), groups, geometry)
    R = ctypes.byref

    out = np.empty((n, o, oh, ow), np.float32)
    assert vednn.vednnConvolutionForward(R(p_in), _ptr(x), R(p_filter), _ptr(w), R(p_out), _ptr(out), R(p_conv), 0) == 0
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)

    assert (
        vednn.vednnConvolutionForwardAddBias(
            R(p_in), _ptr(x), R(p_filter), _ptr(w), R(BiasParam(0, o)), _ptr(bias), R(p_out), _ptr(out), R(p_conv), 0
        )
        == 0
    )
    np.testing.assert_allclose(out, ref + bias[:, None, None], rtol=1e-4, atol=1e-4)

    # Gradients of sum(conv(x, w) * gout), by the adjoint of each tap.
    cg, og = c // groups, o // groups
    gx_ref = np.zeros((n, c, h + 2 * pad[0], w_ + 2 * pad[1]))
    gw_ref = np.zeros(w.shape)
    for g in range(groups):
        gg, wg = gout[:, g * og : (g + 1) * og].astype(np.float64), w[g * og : (g + 1) * og].astype(np.float64)
        for ky in range(kh):
            for kx in range(kw):
                ys = slice(ky * dil[0], ky * dil[0] + stride[0] * (oh - 1) + 1, stride[0])
                xs = slice(kx * dil[1], kx * dil[1] + stride[1] * (ow - 1) + 1, stride[1])
                gx_ref[:, g * cg : (g + 1) * cg, ys, xs] += np.einsum("noyx,oc->ncyx", gg, wg[:, :, ky, kx])
                patch = _taps(x[:, g * cg : (g + 1) * cg].astype(np.float64), ky, kx, geometry)
                gw_ref[g * og : (g + 1) * og, :, ky, kx] = np.einsum("ncyx,noyx->oc", patch, gg)
    gx_ref = gx_ref[:, :, pad[0] : pad[0] + h, pad[1] : pad[1] + w_]

    gx = np.full((n, c, h, w_), np.nan, np.float32)
    assert (
        vednn.vednnConvolutionBackwardData(R(p_out), _ptr(gout), R(p_filter), _ptr(w), R(p_in), _ptr(gx), R(p_conv), 0)
        == 0
    )
    np.testing.assert_allclose(gx, gx_ref, rtol=1e-4, atol=1e-4)

    gw = np.full(w.shape, np.nan, np.float32)
    assert (
        vednn.vednnConvolutionBackwardFilter(
            R(p_in), _ptr(x), R(p_out), _ptr(gout), R(p_filter), _ptr(gw), R(p_conv), 0
        )
        == 0
    )
    np.testing.assert_allclose(gw, gw_ref, rtol=1e-4, atol=1e-4)

    if groups == 1:  # the HWCN filter layout (vednn: group 1 only)
        w_hwcn = np.ascontiguousarray(w.transpose(2, 3, 1, 0))
        p_hwcn = FilterParam(0, 1, c, o, kw, kh)
        assert (
            vednn.vednnConvolutionForward(R(p_in), _ptr(x), R(p_hwcn), _ptr(w_hwcn), R(p_out), _ptr(out), R(p_conv), 0)
            == 0
        )
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_vednn_rejects_inconsistent_params(vednn):
    x = np.zeros((1, 3, 4, 4), np.float32)
    out = np.zeros((1, 4, 4, 4), np.float32)
    w = np.zeros((4, 3, 1, 1), np.float32)
    R = ctypes.byref
    bad_filter = FilterParam(0, 0, 2, 4, 1, 1)  # inChannel must be channels per group (3)
    assert (
        vednn.vednnConvolutionForward(
            R(TensorParam(0, 1, 3, 4, 4)),
            _ptr(x),
            R(bad_filter),
            _ptr(w),
            R(TensorParam(0, 1, 4, 4, 4)),
            _ptr(out),
            R(ConvParam(1, 1, 1, 0, 0, 1, 1)),
            0,
        )
        == 1
    )


def test_vednn_linear_matches_numpy(vednn):
    rng = np.random.default_rng(1)
    batch, n_in, n_out = 4, 7, 5
    x = rng.standard_normal((batch, n_in)).astype(np.float32)
    w = rng.standard_normal((n_in, n_out)).astype(np.float32)  # vednn: [inDim][outDim]
    gout = rng.standard_normal((batch, n_out)).astype(np.float32)
    y = np.empty((batch, n_out), np.float32)
    assert vednn.vednnLinearForward(n_in, n_out, batch, _ptr(x), _ptr(w), _ptr(y)) == 0
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)
    gx = np.empty_like(x)
    assert vednn.vednnLinearBackwardData(n_in, n_out, batch, _ptr(gout), _ptr(w), _ptr(gx)) == 0
    np.testing.assert_allclose(gx, gout @ w.T, rtol=1e-5, atol=1e-5)
    gw = np.empty_like(w)
    assert vednn.vednnLinearBackwardWeight(n_in, n_out, batch, _ptr(x), _ptr(gout), _ptr(gw)) == 0
    np.testing.assert_allclose(gw, x.T @ gout, rtol=1e-5, atol=1e-5)
