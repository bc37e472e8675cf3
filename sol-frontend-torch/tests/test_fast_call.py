"""A plain inference call in one native function (fast_call.py): the same results as the Python path, and every
change the Python path sees (parameters written or replaced, another batch, autograd, autocast, the switch) still
seen."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sol
import torch
from sol.errors import SolInputError
from sol_frontend_torch import fast_call, native_reader
from sol_frontend_torch.settings import FAST_CALL_KEY


@pytest.fixture(autouse=True)
def _native() -> Iterator[None]:
    # CI has a C++ compiler and torch's headers: the helper must build, load and agree with Python
    assert native_reader.ensure() is not None
    assert native_reader.fast_forward_function() is not None
    yield


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5)).eval()


class _Counted:
    """Counts the calls the native function answered (the others took the Python path)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.native_calls = 0
        original = fast_call.FastCall.__call__

        def counted(call: fast_call.FastCall, x: Any) -> torch.Tensor | None:
            out = original(call, x)
            self.native_calls += out is not None
            return out

        monkeypatch.setattr(fast_call.FastCall, "__call__", counted)


def _optimized(monkeypatch: pytest.MonkeyPatch, wildcard: bool = False) -> tuple[torch.nn.Module, Any, _Counted]:
    model = _model()
    example = sol.input([0, 3, 6, 6]) if wildcard else torch.randn(2, 3, 6, 6)
    sol_model = sol.optimize(model, example, **({"batch_size": 2} if wildcard else {}))
    return model, sol_model, _Counted(monkeypatch)


def test_a_plain_call_runs_natively_with_the_python_paths_results(monkeypatch: pytest.MonkeyPatch) -> None:
    model, sol_model, counted = _optimized(monkeypatch)
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        first = sol_model(x)  # Python: prepares, then makes the native call's struct
        assert isinstance(sol_model._sol_fast, fast_call.FastCall)
        second, third = sol_model(x), sol_model(x.clone())
        expected = model(x)
    assert counted.native_calls == 2
    assert torch.equal(first, second) and torch.equal(first, third)
    torch.testing.assert_close(second, expected, rtol=1e-4, atol=1e-5)
    assert second.dtype == torch.float32 and second.shape == (2, 5) and second.data_ptr() != third.data_ptr()


def test_parameters_written_in_place_or_replaced_are_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    model, sol_model, counted = _optimized(monkeypatch)
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        sol_model(x)
        sol_model(x)
        model[0].weight.mul_(2)  # a new version: the native call declines, Python re-prepares
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
        model[1].running_mean.add_(0.5)  # a buffer folded into the derived weights
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
        model[4].weight = torch.nn.Parameter(torch.randn(5, 8 * 6 * 6))  # a new tensor object in the module
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
        model[4].bias.data = torch.randn(5)  # the same tensor object, new storage
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
        assert counted.native_calls == 1  # each change above went through Python
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
    assert counted.native_calls == 2  # and then native again


def test_another_batch_size_and_back(monkeypatch: pytest.MonkeyPatch) -> None:
    model, sol_model, counted = _optimized(monkeypatch, wildcard=True)
    with torch.no_grad():
        for batch in (2, 2, 5, 5, 1, 2, 2):
            x = torch.randn(batch, 3, 6, 6)
            torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
    assert counted.native_calls == 3  # the first call of each batch size goes through Python


class _Subclass(torch.Tensor):
    pass


@pytest.mark.parametrize("how", ["grad", "autocast", "train", "switch", "float64", "non_contiguous", "subclass"])
def test_calls_that_are_not_plain_take_the_python_path(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model, sol_model, counted = _optimized(monkeypatch)
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        sol_model(x)
        sol_model(x)
    assert counted.native_calls == 1
    if how == "grad":  # autograd on and a parameter requiring grad: the output carries the graph
        out = sol_model(x)
        assert out.grad_fn is not None
        out.sum().backward()
        assert model[0].weight.grad is not None
    elif how == "autocast":
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = sol_model(x)
            assert out.dtype == model(x).dtype == torch.bfloat16
    elif how == "train":
        sol_model.train()
        out = sol_model(x)
        assert out.grad_fn is not None
        sol_model.eval()
    elif how == "switch":
        monkeypatch.setitem(sol.config, FAST_CALL_KEY.name, False)
        with torch.no_grad():
            sol_model(x)
            sol_model(x)
    elif how == "float64":
        with torch.no_grad(), pytest.raises(SolInputError, match="dtype float64"):
            sol_model(x.double())
    elif how == "subclass":  # its __torch_function__ is the Python path's to honour (a FakeTensor has no data)
        with torch.no_grad():
            out = sol_model(x.as_subclass(_Subclass))
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    else:
        wide = torch.randn(2, 3, 6, 12)[..., ::2]
        with torch.no_grad():
            torch.testing.assert_close(sol_model(wide), model(wide), rtol=1e-4, atol=1e-5)
    assert counted.native_calls == 1


def test_inference_mode_returns_what_eager_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    model, sol_model, counted = _optimized(monkeypatch)
    x = torch.randn(2, 3, 6, 6)
    with torch.inference_mode():
        sol_model(x)
        out = sol_model(x)
        expected = model(x)
    assert counted.native_calls == 1
    assert out.is_inference() == expected.is_inference()
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_threads_calling_one_model_get_their_own_results(monkeypatch: pytest.MonkeyPatch) -> None:
    model, sol_model, _ = _optimized(monkeypatch)
    inputs = [torch.randn(2, 3, 6, 6) for _ in range(4)]
    with torch.no_grad():
        expected = [model(x) for x in inputs]
        sol_model(inputs[0])
    failures: list[str] = []

    def work(index: int) -> None:
        with torch.no_grad():
            for _ in range(50):
                out = sol_model(inputs[index])
                if not torch.allclose(out, expected[index], rtol=1e-4, atol=1e-5):
                    failures.append(f"thread {index}")
                    return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_a_call_failing_while_it_re_prepares_leaves_no_stale_native_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # the Python check records a changed parameter's new version before it re-prepares: had the native call kept
    # reading those records, the next call would pass its check and run on the derived weights of the old values
    model, sol_model, counted = _optimized(monkeypatch)
    x = torch.randn(2, 3, 6, 6)
    compiled = sol_model._sol_compiled
    with torch.no_grad():
        sol_model(x)
        sol_model(x)
        model[1].running_var.mul_(4)  # folded into the conv's derived weights at prepare
        with monkeypatch.context() as patch:
            patch.setattr(compiled, "prepare", lambda pointers: (_ for _ in ()).throw(RuntimeError("prepare failed")))
            with pytest.raises(RuntimeError, match="prepare failed"):
                sol_model(x)
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)
    assert counted.native_calls == 2  # before the change, and the last call
