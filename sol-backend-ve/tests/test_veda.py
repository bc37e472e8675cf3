"""veda.py without a VE: library lookup, error names and messages, grouped copies."""

from __future__ import annotations

import pytest
from sol.errors import SolDeviceError
from sol_backend_ve import veda
from sol_backend_ve.veda import Arg, Copy, Veda, error_name, group_copies, open_veda


@pytest.fixture
def no_veda(monkeypatch, tmp_path):
    monkeypatch.delenv("SOL_VE_EMULATE", raising=False)
    monkeypatch.delenv(veda.LIBRARY_ENV, raising=False)
    monkeypatch.setattr(veda, "NEC_LIBRARY", tmp_path / "missing" / "libveda.so")
    monkeypatch.setattr(veda.ctypes.util, "find_library", lambda name: None)


def test_no_libveda_gives_none_and_reason(no_veda):
    found, reason = open_veda()
    assert found is None
    assert "no libveda" in reason and "SOL_VE_EMULATE=1" in reason


def test_veda_library_env_missing_file(no_veda, monkeypatch, tmp_path):
    monkeypatch.setenv(veda.LIBRARY_ENV, str(tmp_path / "nope.so"))
    found, reason = open_veda()
    assert found is None and "VEDA_LIBRARY" in reason and "does not exist" in reason


@pytest.mark.parametrize("content", [b"not a shared object", None])
def test_broken_library_never_raises(no_veda, monkeypatch, tmp_path, content):
    if content is None:  # a real library without VEDA's symbols
        path = "libm.so.6"
        monkeypatch.setattr(veda.Path, "is_file", lambda self: True)
    else:
        path = tmp_path / "libveda.so"
        path.write_bytes(content)
    monkeypatch.setenv(veda.LIBRARY_ENV, str(path))
    found, reason = open_veda()
    assert found is None
    assert reason.startswith(("OSError", "AttributeError"))


def test_error_names_follow_vedas_enum():
    assert error_name(0) == "VEDA_SUCCESS"
    assert error_name(1) == "VEDA_ERROR_ALREADY_INITIALIZED"
    assert error_name(24) == "VEDA_ERROR_OUT_OF_MEMORY"
    assert error_name(34) == "VEDA_ERROR_UNKNOWN_VPTR"
    assert error_name(37) == "VEDA_ERROR_VEO_COMMAND_EXCEPTION"
    assert error_name(55) == "VEDA_ERROR_MEMORY_MISALIGNED"
    assert len(veda.ERROR_NAMES) == 56
    assert error_name(99) == "VEDAresult(99)"


class _FakeLib:
    """Answers vedaGetErrorName/String like libveda does."""

    def vedaGetErrorName(self, code, out):
        out._obj.value = error_name(code).encode()
        return 0

    def vedaGetErrorString(self, code, out):
        out._obj.value = b"out of memory"
        return 0


def _fake_veda(emulated=False) -> Veda:
    v = Veda.__new__(Veda)
    v.lib, v._detail, v.emulated = _FakeLib(), None, emulated
    return v


def test_error_message_names_device_call_error_and_remedy():
    err = _fake_veda().error(24, "vedaMemAllocAsync", "ve:1", "1024 bytes")
    assert isinstance(err, SolDeviceError)
    text = str(err)
    assert text.startswith("ve:1: vedaMemAllocAsync (1024 bytes) failed with VEDA_ERROR_OUT_OF_MEMORY: out of memory")
    assert "free tensors or use a smaller batch" in text


def test_device_lost_message_points_at_sol_devices_and_veos():
    text = str(_fake_veda().error(37, "vedaStreamSynchronize", "ve:0"))
    assert "VEDA_ERROR_VEO_COMMAND_EXCEPTION" in text and "`sol devices`" in text and "VEOS" in text
    assert "(emulated)" in str(_fake_veda(emulated=True).error(37, "vedaStreamSynchronize", "ve:0"))


def test_adjacent_small_copies_form_one_run():
    base = 5 << 37  # allocation 5, offset 0 (VEDA's vptr layout)
    copies = [(base + 8, 2000, 8), (base, 1000, 8), (base + 16, 3000, 16)]
    runs = group_copies(copies)
    assert len(runs) == 1
    assert [c.device for c in runs[0]] == [base, base + 8, base + 16]


def test_gaps_large_copies_and_other_allocations_stay_separate():
    a, b = 1 << 37, 2 << 37
    copies = [
        Copy(a, 0, 8),
        Copy(a + 16, 0, 8),  # gap of 8 bytes
        Copy(a + 24, 0, 1 << 20),  # adjacent but large
        Copy(b, 0, 8),  # another allocation
        Copy(b + 8, 0, 0),  # empty: no transfer at all
    ]
    runs = group_copies(copies, small=1 << 16)
    assert [len(r) for r in runs] == [1, 1, 1, 1]


def test_stack_arg_intent_is_checked():
    with pytest.raises(ValueError, match="intent"):
        Arg.stack(bytearray(8), "sideways")
    assert Arg.stack(bytearray(8), "inout").intent == "inout"
    assert Arg.vptr(3) == Arg("vptr", 3)
