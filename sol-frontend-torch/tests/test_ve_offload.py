"""PyTorch on the emulated SX-Aurora VE (``SOL_VE_EMULATE=1``), through transparent offloading.

The emulated VE (sol_backend_ve.emulator) keeps device memory in a separate
process and runs the VE flavour's code compiled for the host, behind SOL's
real VEDA binding: what passes here is the whole VE path except NEC's
compiler and hardware. The zoo's CI half must match eager PyTorch as on
x86; the training checks, the copy counts and the refusal of foreign
tensors are the ones every offload device passes
(`sol_frontend_torch.offload_checks`).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import sol.pytorch as sol
import torch
from sol_frontend_torch import gradient_check, offload_checks

from .test_training_sweep import FLOAT64_TOLERANCE
from .test_zoo_optimize import CASES, check_zoo_model

pytest.importorskip("sol_backend_ve", reason="sol-backend-ve is not installed")


def _forget() -> None:
    """Drop the probe and runtime caches, and stop the emulated VE's device process if one was started."""
    from sol.devices import forget
    from sol.runtime.offload import forget_runtimes

    for runtime in forget_runtimes():
        if runtime.device == "ve:0":
            runtime.ve.veda.close()
    forget()


@pytest.fixture
def ve(emulator_dir: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The emulated ve:0 for one test (the probe and runtime caches see the setting change)."""
    monkeypatch.setenv("SOL_VE_EMULATE", "1")
    monkeypatch.setenv("SOL_VE_EMULATOR_DIR", emulator_dir)
    _forget()
    yield "ve"
    _forget()


def test_the_emulated_ve_is_listed_and_labelled(ve: str) -> None:
    (device,) = [d for d in sol.devices(print_dump=False) if d.type == "ve"]
    assert device.id == "ve:0" and "emulated" in device.name and device.properties["emulated"] is True
    assert "emulated" in sol.versions()["ve:veda"]


def test_device_set_selects_the_ve(ve: str) -> None:
    """``sol.device.set("ve", 0)`` instead of ``device=``: the same transparent offloading."""
    import sol as sol_core
    from sol.devices import forget

    model = offload_checks.SmallNet().eval()
    x = torch.randn(2, 3, 8, 8)
    sol_core.device.set("ve", 0)
    try:
        sol_model = sol.optimize(model, x)
    finally:
        forget()  # the selection is process-wide
    assert str(sol_model.compiled.device) == "ve:0"
    with torch.no_grad():
        torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)


def test_inference_and_copies(ve: str) -> None:
    offload_checks.check_inference_and_copies(ve)


def test_training(ve: str) -> None:
    offload_checks.check_training(ve)


def test_foreign_device_is_refused(ve: str) -> None:
    offload_checks.check_foreign_device_is_refused(ve)


def test_profile_reports_copies(ve: str) -> None:
    offload_checks.check_profile_reports_copies(ve)


@pytest.mark.parametrize("name", CASES)
def test_zoo_on_the_emulated_ve(ve: str, name: str) -> None:
    """The zoo test's models (its CI half here, the rest in the slow set) with CPU tensors, run on ve:0."""
    assert str(check_zoo_model(name, device=ve).compiled.device) == "ve:0"


def test_out_of_device_memory_names_the_device(ve: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose parameters do not fit the VE: a SOL error naming the device and what to do, not a crash."""
    from sol.errors import SolDeviceError

    monkeypatch.setenv("SOL_VE_EMULATE_MEMORY", "256k")
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU()).eval()  # 1 MiB of weights
    x = torch.randn(2, 512)
    with pytest.raises(SolDeviceError, match=r"ve:0.*(out of|OUT_OF).*memory.*(free|smaller)"):
        sol_model = sol.optimize(model, x, device=ve)
        with torch.no_grad():
            sol_model(x)


#: the training sweep's CI models (test_training_sweep.FAST) at its smaller size; the rest on the VE in the slow set
#: (mobilenet_v3_small's depthwise and hardswish gradients run library-free in CI on x86: test_zoo_library_free)
TRAINING = ["resnet18", "squeezenet1_1"]
TRAINING_SLOW = ["mobilenet_v3_small", "shufflenet_v2_x1_0", "mnasnet1_0"]


@pytest.mark.parametrize("name", [*TRAINING, *[pytest.param(n, marks=pytest.mark.slow) for n in TRAINING_SLOW]])
def test_training_gradients_on_the_emulated_ve(ve: str, name: str) -> None:
    """One cross-entropy step on ve:0 (host parameters, their .grad filled from the device): float32 within 3x of
    eager's error against float64, and float64 equal to eager float64, as on x86 (test_training_sweep)."""
    model, x, target = gradient_check.classifier_case(name, 64, 8)
    on_ve = functools.partial(sol.optimize, device=ve)
    report = gradient_check.check(f"{name} 64px b8 on {ve}", model, x, target, on_ve, on_ve)
    assert report.sol_float64 is not None and report.sol_float64.error <= FLOAT64_TOLERANCE, report
    assert report.within(3.0), gradient_check.table([report])


HOST_POINTER = textwrap.dedent("""
    import numpy as np, sol.pytorch as sol, torch
    from sol.errors import SolDeviceError
    from sol_frontend_torch.offload_checks import SmallNet

    model = sol.optimize(SmallNet().eval(), torch.randn(2, 3, 8, 8), device="ve").compiled
    model.prepare([p.detach().numpy().ctypes.data for p in SmallNet().state_dict().values()][:len(model.param_names)])
    host = np.zeros((2, 3, 8, 8), np.float32)
    out = np.zeros((2, 5), np.float32)
    try:  # host addresses where the VE's own belong: generated code dereferences them on the device
        model.run_on_device([host.ctypes.data], [out.ctypes.data], 2).result()
    except SolDeviceError as exc:
        print("LOUD:", exc)
    else:
        print("SILENT")
    try:
        model.run_on_device([host.ctypes.data], [out.ctypes.data], 2).result()
    except SolDeviceError as exc:
        print("STILL:", exc)
""")


def test_a_host_pointer_on_the_device_fails_loudly(ve: str) -> None:
    """A host address in a pointer table faults on the emulated VE (separate address space) and says so; the device
    is lost afterwards, as a real VE is after an exception. In a child process: the lost device stays lost."""
    sol.optimize(offload_checks.SmallNet().eval(), torch.randn(2, 3, 8, 8), device=ve)  # the child hits the cache
    done = subprocess.run([sys.executable, "-c", HOST_POINTER], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SOL_VE_EMULATE": "1"}, check=False)
    out = done.stdout + done.stderr
    assert "LOUD:" in out and "SILENT" not in out, out
    loud = out.split("LOUD:", 1)[1].splitlines()[0]
    assert "ve:0" in loud and "0x" in loud, loud
    assert "STILL:" in out, out


def test_the_offload_benchmark_reports_copies_per_call(ve: str) -> None:
    """benchmarks/ve_offload.py's measurement on a small CNN: one input and one output per call, one launch, the
    parameters counted once."""
    from . import _benchmark_scripts

    bench = _benchmark_scripts.load("ve_offload")
    row = bench.measure("small", 2, runs=2, rounds=1, model=offload_checks.SmallNet().eval(),
                        example=torch.randn(2, 3, 8, 8))
    assert (row["to_device"], row["to_host"], row["launches"]) == (1, 1, 1)
    assert (row["to_device_bytes"], row["to_host_bytes"]) == (2 * 3 * 8 * 8 * 4, 2 * 5 * 4)
    assert row["parameters"] > 0 and row["x86_ms"] > 0 and row["ve_ms"] > 0
    assert "small" in bench.table([row])
