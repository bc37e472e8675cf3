"""ParamSlots.pointer_array: one cached pointer array per call, rebuilt (and re-prepared) whenever a parameter changed.

Every test runs twice: with the per-call check in Python, and with the compiled native_reader.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
import sol
import torch
from sol_frontend_torch import native_reader
from sol_frontend_torch.params import ParamSlots


@pytest.fixture(autouse=True)
def check(param_check: str) -> str:  # every test, both ways (conftest.param_check)
    return param_check


class _Recorder:
    def __init__(self) -> None:
        self.prepared: list[list[int]] = []

    def prepare(self, pointers: list[int]) -> None:
        self.prepared.append(list(pointers))


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))


def _addresses(array: Any) -> list[int]:
    return [int(p) for p in array]


def test_unchanged_parameters_reuse_the_array_without_prepare() -> None:
    model, compiled = _model(), _Recorder()
    slots = ParamSlots(model, ["0.weight", "0.bias", "1.running_mean"])
    first = slots.pointer_array(compiled)
    assert isinstance(first, ctypes.Array)
    assert slots.pointer_array(compiled) is first
    assert len(compiled.prepared) == 1


def test_in_place_updates_and_reassignment_are_seen() -> None:
    model, compiled = _model(), _Recorder()
    slots = ParamSlots(model, ["0.weight", "1.running_mean"])
    slots.pointer_array(compiled)
    with torch.no_grad():
        model[0].weight.add_(1.0)  # what an optimizer step or load_state_dict does
    slots.pointer_array(compiled)
    assert len(compiled.prepared) == 2
    model[1].running_mean = torch.ones(3)  # a new tensor: a new address
    array = slots.pointer_array(compiled)
    assert len(compiled.prepared) == 3
    assert _addresses(array)[1] == model[1].running_mean.data_ptr()


def test_non_contiguous_parameters_get_a_fresh_copy_each_call() -> None:
    model, compiled = _model(), _Recorder()
    model[0].weight = torch.nn.Parameter(torch.randn(3, 4).t().contiguous().t())
    assert not model[0].weight.is_contiguous()
    slots = ParamSlots(model, ["0.weight"])
    pointers = slots.pointer_array(compiled)
    assert isinstance(pointers, list)
    assert pointers[0] != model[0].weight.data_ptr()  # a contiguous copy, kept alive by the slots


def test_a_reassigned_parameter_sharing_the_old_storage_is_followed() -> None:
    """Between assignments the tensors are not looked up again; an assignment (a registration hook) makes the slots
    find the new object, whose in-place updates the old one would not show (same address, own version)."""
    model, compiled = _model(), _Recorder()
    slots = ParamSlots(model, ["0.weight"])
    slots.pointer_array(compiled)
    model[0].weight = torch.nn.Parameter(model[0].weight.data)  # same storage, a version counter of its own
    slots.pointer_array(compiled)
    prepared = len(compiled.prepared)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    slots.pointer_array(compiled)
    assert len(compiled.prepared) == prepared + 1


def test_data_assignment_is_seen_by_its_new_address() -> None:
    model, compiled = _model(), _Recorder()
    slots = ParamSlots(model, ["0.weight"])
    slots.pointer_array(compiled)
    model[0].weight.data = torch.ones(3, 4)  # no hook and no version bump: only the address changes
    array = slots.pointer_array(compiled)
    assert len(compiled.prepared) == 2
    assert _addresses(array)[0] == model[0].weight.data_ptr()


def test_the_native_reader_is_used_once_loaded(check: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model, compiled = _model(), _Recorder()
    slots = ParamSlots(model, ["0.weight", "0.bias"])
    first = slots.pointer_array(compiled)
    calls = []
    reader = native_reader._reader
    if reader is not None:
        monkeypatch.setattr(native_reader, "_reader", lambda *args: calls.append(args) or reader(*args))
    assert slots.pointer_array(compiled) is first
    with torch.no_grad():
        model[0].bias.mul_(2.0)
    slots.pointer_array(compiled)
    assert len(calls) == (2 if check == "native" else 0)
    assert len(compiled.prepared) == 2


def test_a_tensor_the_reader_cannot_read_leaves_the_check_to_python(check: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model, compiled = _model(), _Recorder()
    slots = ParamSlots(model, ["0.weight"])
    slots.pointer_array(compiled)
    if native_reader._reader is not None:
        # what it answers for an inference tensor or a wrapper subclass
        monkeypatch.setattr(native_reader, "_reader", lambda *args: -1)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    slots.pointer_array(compiled)
    slots.pointer_array(compiled)
    assert len(compiled.prepared) == 2
    assert slots._native is (check == "python")


def test_the_setting_turns_the_reader_off() -> None:
    sol.config[native_reader.READER_KEY.name] = False
    assert native_reader.loaded() is None
