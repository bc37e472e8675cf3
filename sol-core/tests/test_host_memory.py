"""The buffers a compiled model owns: zeroed, aligned as generated code assumes, large ones on huge-page bounds."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import sol
from sol.runtime import host_memory


def _view(buffer: object, address: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))


@pytest.mark.parametrize("nbytes", [1, 4096, host_memory.HUGE_FROM - 1, host_memory.HUGE_FROM, 5 * 2**20 + 3])
def test_buffers_are_zeroed_writable_and_aligned(nbytes: int) -> None:
    buffer, address = host_memory.aligned_buffer(nbytes)
    huge = nbytes >= host_memory.HUGE_FROM and host_memory.huge_pages_available()
    assert address % (host_memory.HUGE_PAGE if huge else host_memory.ALIGN) == 0
    view = _view(buffer, address, nbytes)
    assert not view.any()
    view[:] = 7  # every byte up to nbytes lies inside the buffer
    assert int(view.sum()) == 7 * nbytes


def test_the_switch_keeps_ordinary_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sol.config, "runtime::huge_pages", False)
    buffer, address = host_memory.aligned_buffer(host_memory.HUGE_FROM * 2)
    assert isinstance(buffer, np.ndarray) and buffer.base is None  # np.zeros, not a mapping
    assert address % host_memory.ALIGN == 0


def test_this_linux_python_can_ask_for_huge_pages() -> None:
    # CI runs Linux with Python >= 3.8: the mapping path is the one models take there
    assert host_memory.huge_pages_available()
    buffer, _ = host_memory.aligned_buffer(host_memory.HUGE_FROM)
    assert isinstance(buffer, np.ndarray) and buffer.base is not None  # a view of the mapping it keeps alive
