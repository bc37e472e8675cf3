"""PyTorch's VE device (sol_backend_ve.torch_ve) on the emulated VE: tensors, copies, the CPU fallback, torch.ve,
and SOL models running on VE tensors with no host copies."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")

import sol  # noqa: E402
import sol_backend_ve.torch_ve as torch_ve  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def ve(torch_ve_device):
    """The emulated VE as PyTorch's VE device (conftest.torch_ve_device)."""
    return torch_ve_device


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.uint8])
def test_round_trip(ve, dtype):
    x = (torch.arange(24) % 7).to(dtype).reshape(2, 3, 4)
    v = x.to("ve:0")
    assert v.device == ve and v.dtype == dtype and v.shape == x.shape
    assert torch.equal(v.cpu(), x)
    assert torch.equal(v.clone().cpu(), x)  # VE -> VE
    assert torch.equal(torch.empty_like(v).copy_(v).cpu(), x)


def test_copy_counters_count_every_host_transfer(ve):
    x = torch.arange(10, dtype=torch.float32)
    torch_ve.reset_copy_counters()
    assert torch_ve.copy_counters() == dict.fromkeys(torch_ve.COPY_COUNTERS, 0)
    v = x.ve()
    v.cpu()
    v.cpu()
    assert torch_ve.copy_counters() == {"to_ve_copies": 1, "to_ve_bytes": 40, "to_cpu_copies": 2, "to_cpu_bytes": 80}
    torch_ve.reset_copy_counters()
    assert sum(torch_ve.copy_counters().values()) == 0


def test_views_and_non_contiguous_copies(ve):
    x = torch.randn(4, 6)
    v = x.ve()
    assert v.data_ptr() != x.data_ptr() and v.is_ve
    torch.testing.assert_close(v.t().cpu(), x.t())
    torch.testing.assert_close(v[1:, ::2].cpu(), x[1:, ::2])
    torch.testing.assert_close(v.t().contiguous().cpu(), x.t().contiguous())  # VE -> VE, strided
    torch.testing.assert_close(v.view(24).cpu(), x.view(24))
    torch.testing.assert_close(v.reshape(3, 8).cpu(), x.reshape(3, 8))
    w = torch.zeros(4, 6, device=ve)
    w[:, 1::2] = x[:, ::2]  # CPU -> strided VE view
    expect = torch.zeros(4, 6)
    expect[:, 1::2] = x[:, ::2]
    torch.testing.assert_close(w.cpu(), expect)
    w.t()[0].copy_(v[:, 0].to(torch.float64))  # dtype change VE -> strided VE
    expect.t()[0] = x[:, 0]
    torch.testing.assert_close(w.cpu(), expect)
    assert v[2, 3].item() == x[2, 3].item()
    out = torch.empty(3, 4)
    out.t().copy_(v[:4, :3])  # VE -> strided CPU
    torch.testing.assert_close(out.t(), x[:4, :3])


def test_fill_zero_resize(ve):
    v = torch.empty(3, 5, device=ve)
    v.fill_(2.5)
    assert torch.equal(v.cpu(), torch.full((3, 5), 2.5))
    v[:, 1].zero_()
    expect = torch.full((3, 5), 2.5)
    expect[:, 1] = 0
    assert torch.equal(v.cpu(), expect)
    v.fill_(torch.tensor(7.0))
    assert torch.equal(v.cpu(), torch.full((3, 5), 7.0))
    r = torch.arange(6.0).ve()
    r.resize_(4, 5)
    assert r.shape == (4, 5) and torch.equal(r.view(-1)[:6].cpu(), torch.arange(6.0))


def test_torch_ve_api(ve):
    assert torch.ve.device_count() == 1 and torch.ve.current_device() == 0
    torch.ve.set_device(0)
    before = torch.ve.memory_allocated()
    v = torch.empty(1000, device="ve")
    assert v.device == ve
    assert torch.ve.memory_allocated(0) == before + 4000
    del v
    assert torch.ve.memory_allocated("ve:0") == before
    with torch.ve.device(0):
        assert torch.ve.current_device() == 0
    with torch.ve.device_of(torch.ones(1, device=ve)):
        torch.ve.synchronize()
    torch.ve.synchronize("ve:0")
    m = torch.nn.Linear(3, 2).ve()
    assert m.weight.device == ve and m.bias.device == ve
    assert torch_ve.extension().virtual_pointer(m.weight.data_ptr()) != m.weight.data_ptr()
    with pytest.raises(ValueError):
        torch.ones(1).ve("cpu")


def test_fallback_warns_once_and_matches_cpu(ve):
    x = torch.rand(5, 7) + 0.5
    with pytest.warns(UserWarning, match=r"aten::lgamma.*has no VE kernel: it runs on the CPU"):
        got = torch.lgamma(x.ve())
    assert got.device == ve
    torch.testing.assert_close(got.cpu(), torch.lgamma(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(torch.lgamma(x.ve()).cpu(), torch.lgamma(x))
    assert sum(n for op, n in torch_ve.fallback_counts.items() if "lgamma" in op) >= 2
    y = x.ve()
    y.lgamma_()  # in place: the result lands in the VE tensor
    torch.testing.assert_close(y.cpu(), torch.lgamma(x))
    # arithmetic, reductions, printing, an optimizer: all work (natively or through the fallback)
    a, b = torch.randn(4, 3), torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close((a.ve() * b.ve() + 1).sum(0).cpu(), (a * b + 1).sum(0))
        assert "device='ve:0'" in repr(a.ve())
        p = torch.nn.Parameter(a.ve())
        p.grad = torch.ones(4, 3, device=ve)
        torch.optim.SGD([p], lr=0.5).step()
        torch.testing.assert_close(p.detach().cpu(), a - 0.5)


def test_fallback_off_raises_naming_the_op(ve):
    sol.config["ve::cpu_fallback"] = False
    try:
        with pytest.raises(NotImplementedError, match=r"aten::digamma.*no VE kernel.*\.cpu\(\)"):
            torch.digamma(torch.ones(3, device=ve))
    finally:
        del sol.config["ve::cpu_fallback"]
    assert torch.ones(2, device=ve).fill_(3).cpu().tolist() == [3.0, 3.0]  # native ops are unaffected


def test_sol_model_on_ve_tensors(ve):
    from sol_frontend_torch.offload_checks import SmallNet

    torch.manual_seed(0)
    model = SmallNet().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        expected = model(x)
        sol_model = sol.optimize(model, x)
        sol_model.to("ve")
        assert model.conv.weight.device == ve  # the parameters moved, shared with the original model
        xv = x.ve()
        out = sol_model(xv)  # compiles for the VE on first use
        assert out.device == ve
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-5)
        native = sol_model._sol_native["ve:0"]
        stats = native.runtime.ve.stats
        before, copies = native.transfers.copy(), stats.transfers
        for _ in range(3):
            out = sol_model(xv)
        spent = native.transfers.since(before)
        assert (spent.to_device, spent.to_host, spent.parameters, spent.launches) == (0, 0, 0, 3)
        assert stats.transfers == copies  # no VEDA copy at all: inputs, parameters and outputs stay on the VE
        model.fc.weight.add_(1.0)  # an in-place change on the VE: derived parameters recomputed, still no copies
        torch.testing.assert_close(sol_model(xv).cpu(), model(xv).cpu(), rtol=1e-4, atol=1e-5)
        assert native.transfers.since(before).parameters == 0
        with pytest.raises(sol.errors.SolError, match=r"parameter 'conv.weight' is on ve:0.*cpu"):
            sol_model(x)  # a model moved to the VE, called with CPU tensors
        sol_model.to("cpu")
        with pytest.raises(sol.errors.SolError, match=r"parameter 'conv.weight' is on cpu.*ve:0"):
            sol_model(xv)


def test_tutorial_inference_flow(ve):
    """The original SOL's tutorial up to training: optimize, load_state_dict, .to('ve'), inference under no_grad."""
    from sol_frontend_torch.offload_checks import SmallNet

    torch.manual_seed(3)
    trained = SmallNet().eval()
    model = SmallNet().eval()
    x = torch.randn(4, 3, 8, 8)
    sol_model = sol.optimize(model, x)
    sol_model.load_state_dict(trained.state_dict())
    sol_model.to("ve:0")
    with torch.no_grad():
        out = sol_model(x.to("ve:0"))
        torch.testing.assert_close(out.cpu(), trained(x), rtol=1e-4, atol=1e-5)
        assert out.argmax(1).cpu().tolist() == trained(x).argmax(1).tolist()  # argmax on the VE: the fallback
    # the training half of the tutorial: test_torch_ve_training.py


@pytest.mark.parametrize("map_location", [None, "ve", "ve:0", "cpu", "function", "dict"])
def test_save_and_load(ve, tmp_path, map_location):
    import io

    x = torch.randn(3, 4)
    model = torch.nn.Linear(4, 2)
    xv = x.ve()
    saved = {"x": xv, "view": xv[1:, ::2], "state": model.ve().state_dict(), "number": 3}
    path = tmp_path / "ve.pt"
    torch_ve.fallback_counts.clear()
    torch.save(saved, path)
    location = {"function": lambda storage, where: storage, "dict": {"ve:0": "cpu"}}.get(map_location, map_location)
    loaded = torch.load(path, map_location=location)
    device = torch.device("cpu") if map_location in ("cpu", "function", "dict") else ve
    assert loaded["number"] == 3
    assert loaded["x"].device == device and loaded["view"].device == device
    assert torch.equal(loaded["x"].cpu(), x) and torch.equal(loaded["view"].cpu(), x[1:, ::2])
    assert loaded["view"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()  # still a view
    for name, value in model.state_dict().items():
        assert loaded["state"][name].device == device
        assert torch.equal(loaded["state"][name].cpu(), value.cpu())
    fresh = torch.nn.Linear(4, 2).ve()
    fresh.load_state_dict(loaded["state"])
    assert torch.equal(fresh.weight.cpu(), model.weight.cpu())
    buffer = io.BytesIO()
    torch.save(x, buffer)  # a CPU file loaded onto the VE
    buffer.seek(0)
    assert torch.equal(torch.load(buffer, map_location="ve").cpu(), x)
    assert torch_ve.fallback_counts == {}  # storage copies and set_ are native
    with pytest.raises(RuntimeError, match=r"ve:3.*1 VE\(s\).*map_location"):
        torch.load(path, map_location="ve:3")


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("SOL_VE_EMULATE", "VEDA_LIBRARY")}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=environ,
                          timeout=120, check=False)


@pytest.mark.parametrize("autoload", ["1", "0"], ids=["torch-autoload", "import-sol_backend_ve"])
def test_broken_ve_runtime_is_one_warning_and_torch_still_works(tmp_path, autoload):
    """A broken VE runtime: import torch (through PyTorch's backend autoload entry point, or without it and an
    explicit import) works, the first VE use gives one warning, torch.ve says unavailable, CPU tensors work, and a
    file of VE tensors loads with map_location='cpu' (and names that workaround without it)."""
    broken = tmp_path / "libveda.so"
    broken.write_text("not a library")
    saved = tmp_path / "ve.pt"
    torch.save({"w": torch.arange(3.0).ve()}, saved)
    result = _run(f"""
        import sys, warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            import torch
            print("autoloaded", hasattr(torch, "ve"), "sol" in sys.modules)
            import sol_backend_ve
            print(torch.ve.is_available(), torch.ve.device_count(), (torch.ones(2) + 1).tolist())
            try:
                torch.ones(2, device="ve:0")
            except RuntimeError as exc:
                print("raised", "libveda" in str(exc) or "cannot load" in str(exc))
            try:
                torch.load({str(saved)!r})
            except RuntimeError as exc:
                print("load", "map_location='cpu'" in str(exc))
            print(torch.load({str(saved)!r}, map_location="cpu")["w"].tolist())
        print(len([w for w in caught if "VE device is not available" in str(w.message)]))
    """, VEDA_LIBRARY=str(broken), TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # through the entry point torch.ve exists right after import torch, and sol was not imported for it
    assert lines[0] == ("autoloaded True False" if autoload == "1" else "autoloaded False False")
    assert lines[1:] == ["False 0 [2.0, 2.0]", "raised True", "load True", "[0.0, 1.0, 2.0]", "1"], result.stdout


def test_import_torch_installs_torch_ve_and_sol_pytorch_starts_it():
    """import torch (PyTorch's autoload) installs torch.ve and starts nothing; a VE tensor starts the device; after
    import sol.pytorch it has started (a model's .to('ve') needs the device's guard before any VE op runs)."""
    result = _run("""
        import sys
        import torch
        print("sol_torch_ve" in sys.modules, "sol" in sys.modules, hasattr(torch, "ve"))
        x = torch.arange(3.0, device="ve:0")  # the first VE tensor starts the device
        print("sol_torch_ve" in sys.modules, (x * 2).cpu().tolist())
    """, SOL_VE_EMULATE="1", TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False False True", "True [0.0, 2.0, 4.0]"], result.stdout
    result = _run("""
        import torch
        import sol.pytorch as sol
        model = torch.nn.Linear(3, 2).to("ve")
        print(model.weight.device, torch.ve.is_available())
    """, SOL_VE_EMULATE="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ve:0", "True"], result.stdout


def test_import_sol_never_imports_torch():
    result = _run("import sys, sol, sol_backend_ve; print('torch' in sys.modules)")
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stderr


def test_a_ve_started_after_the_first_backward_still_trains():
    """PyTorch's autograd engine makes its device queues at the process's first backward; a VE started after that
    (here: a CPU backward, then the first VE tensor) has none. Its backward passes run on the calling thread, with
    one warning saying so and how to avoid it, instead of PyTorch's internal assert."""
    result = _run("""
        import warnings
        import torch
        x = torch.ones(3, requires_grad=True)
        (x * 2).sum().backward()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            w = torch.arange(3.0, device="ve:0").requires_grad_()
            (w * w).sum().backward()
        print(w.grad.cpu().tolist(), x.grad.tolist())
        print([str(c.message).split(":")[0] for c in caught if "autograd engine" in str(c.message)])
    """, SOL_VE_EMULATE="1", TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[0.0, 2.0, 4.0] [2.0, 2.0, 2.0]",
        "[\"PyTorch's autograd engine started before the VE (a backward ran earlier in this process; it has queues "
        "for 0 device(s), the VE has 1)\"]"], result.stdout
