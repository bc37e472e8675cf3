"""vednn on the VE: Conv/Linear (and their gradients) as library calls (`sol_backend_ve.vednn`).

On the emulated VE (``SOL_VE_EMULATE=1``) the emulator's libvednn is always
there, so the generated code calls it; the same source compiles for the
real VE with clang-14's VE target (no header: the prelude declares vednn's
ABI). ``ve::dnn`` False gives library-free code.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sol
from sol_backend_ve import toolchain
from sol_backend_ve.flavour import VeFlavour
from sol_backend_ve.vednn import DNN_KEY, VEDNN_KEY, VednnModule, find_vednn

torch = pytest.importorskip("torch")

EM_VE = 251
INCLUDE = re.compile(r"^\s*#\s*include\b", re.MULTILINE)
needs_clang = pytest.mark.skipif(shutil.which("clang-14") is None,
                                 reason="clang-14 (LLVM's VE target) is not installed: apt-get install clang-14")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ (the emulated VE's compiler) is not installed")


class Net(torch.nn.Module):
    """Conv with bias, a grouped strided dilated padded conv without, a 1x1 conv, and two linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=2, dilation=2, groups=2, bias=False)
        self.c3 = torch.nn.Conv2d(8, 8, 1)
        self.fc1 = torch.nn.Linear(8 * 4 * 4, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        x = torch.tanh(self.c3(x))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def _graph(model, example):
    from sol.passes import run_inference_passes
    from sol.plugins import registry

    return run_inference_passes(registry().frontends["pytorch"].parse(model, (example,), None))


def _source(graph, flavour: VeFlavour) -> str:
    from sol.codegen.plan import plan
    from sol.codegen.source import generate
    from sol.compiler import model_prefix

    the_plan = plan(graph, flavour)
    return generate(graph, the_plan.programs, the_plan.memory, flavour, model_prefix(graph))


def _elf_machine(data: bytes) -> int:
    assert data[:4] == b"\x7fELF"
    return struct.unpack_from("<H" if data[5] == 1 else ">H", data, 18)[0]


@pytest.fixture
def ve(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The emulated ve:0 for one test (the probe and runtime caches see the setting change)."""
    from sol.devices import forget
    from sol.runtime.offload import forget_runtimes

    monkeypatch.setenv("SOL_VE_EMULATE", "1")
    forget_runtimes()
    forget()
    yield "ve"
    forget_runtimes()
    forget()


# -- generated code ---------------------------------------------------------------------------------------------
@needs_clang
def test_generated_code_calls_vednn_and_compiles_for_the_ve(tmp_path):
    torch.manual_seed(0)
    source = _source(_graph(Net().eval(), torch.randn(2, 3, 8, 8)), VeFlavour(emulate=True))
    assert not INCLUDE.search(source), "VE code includes no header: the prelude declares vednn's ABI"
    assert "typedef struct { dataType_t dtype; int batch; int channel; int width; int height; } vednnTensorParam_t;" \
        in source
    assert source.count("vednnConvolutionForwardAddBias(&in") == 2  # c1, c3
    assert source.count("vednnConvolutionForward(&in") == 1  # c2 (no bias)
    assert "sol_vednn_conv(2, 2, 2, 2, 2, 2, 2)" in source  # groups, stride, padding, dilation of c2
    assert source.count("vednnLinearForward(") == 3  # 2 calls + the declaration
    assert "SOL_STATUS_LIBRARY" in source and "sol_derived_reserve(" in source  # fc weights packed [in][out]
    path = tmp_path / "model.cpp"
    path.write_text(source)
    (obj,) = toolchain.compile_objects(path, tmp_path)
    assert _elf_machine(obj.read_bytes()) == EM_VE


def test_dnn_off_generates_library_free_code(monkeypatch):
    monkeypatch.setitem(sol.config, DNN_KEY.name, False)
    flavour = VeFlavour(emulate=True)
    assert flavour.dnn is None
    source = _source(_graph(Net().eval(), torch.randn(2, 3, 8, 8)), flavour)
    assert "vednn" not in source
    assert isinstance(VeFlavour(emulate=True, dnn=True).dnn, VednnModule)


def test_nec_vednn_is_found_and_linked(tmp_path, monkeypatch):
    monkeypatch.delenv(toolchain.EMULATE_ENV, raising=False)
    prefix = tmp_path / "vednn"
    (prefix / "include").mkdir(parents=True)
    (prefix / "include" / "vednn.h").write_text("")
    (prefix / "lib").mkdir()
    (prefix / "lib" / "libvednn_openmp.so").write_text("")
    assert find_vednn(str(tmp_path / "nowhere")) is None
    monkeypatch.setitem(sol.config, VEDNN_KEY.name, str(prefix))
    ncc = tmp_path / "bin" / "nc++"
    ncc.parent.mkdir()
    ncc.write_text("#!/bin/sh\necho 'nc++ (NCC) 5.0.2' >&2\n")
    ncc.chmod(0o755)
    flavour = VeFlavour(cxx=str(ncc))
    assert isinstance(flavour.dnn, VednnModule) and str(prefix) in flavour.dnn.key()
    command = flavour.compile_command(Path("m.cpp"), Path("m.so"))
    assert command[-3:] == [f"-L{prefix / 'lib'}", "-lvednn_openmp", f"-Wl,-rpath,{prefix / 'lib'}"]
    assert "-lvednn_openmp" in flavour.toolchain_id()
    assert VeFlavour(cxx=str(ncc), dnn=False).dnn is None


@needs_gxx
def test_a_failing_vednn_call_sets_the_library_status(sol_cache_dir, tmp_path):
    """The emulated libvednn rejects a filter that does not match the tensors: the forward reports the library."""
    from sol.compiler import model_prefix
    from sol.runtime import CompiledModel

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1)).eval()
    example = torch.randn(1, 3, 8, 8)
    graph = _graph(model, example)
    flavour = VeFlavour(emulate=True)
    source = _source(graph, flavour)
    broken = source.replace("sol_vednn_filter(8, 3, 3, 3)", "sol_vednn_filter(8, 5, 3, 3)")
    assert broken != source
    path, library = tmp_path / "model.cpp", tmp_path / "model.so"
    path.write_text(broken)
    done = subprocess.run(flavour.compile_command(path, library), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = CompiledModel(graph, library, model_prefix(graph))
    params = {name: np.asarray(t.data) for name, t in graph.params.items()}
    with pytest.raises(sol.errors.SolError, match="library call"):
        compiled.run_numpy([example.numpy()], params)


# -- the emulated VE, through transparent offloading --------------------------------------------------------------
@needs_gxx
def test_inference_through_vednn_matches_eager(ve: str):
    import sol.pytorch as solt

    torch.manual_seed(0)
    model = Net().eval()
    sol_model = solt.optimize(model, solt.input([0, 3, 8, 8]), batch_size=2, device=ve)
    plan = sol_model.compiled.metadata["plan"]
    assert "5 library calls" in plan, plan
    assert sum(title.startswith("DNN ") for title in sol_model.compiled.metadata["clusters"]) == 5
    with torch.no_grad():
        for batch in (1, 3):  # the batch is a runtime value: the param structs are filled per call
            x = torch.randn(batch, 3, 8, 8)
            torch.testing.assert_close(sol_model(x), model(x), rtol=1e-4, atol=1e-5)


@needs_gxx
def test_training_gradients_through_vednn_match_eager(ve: str):
    import sol.pytorch as solt

    torch.manual_seed(1)
    model, reference = Net().train(), Net().train()
    reference.load_state_dict(model.state_dict())
    x, target = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
    sol_model = solt.optimize(model, x, device=ve)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):  # the second step runs on the weights the first one changed (prepare packs them again)
        for net, opt in ((sol_model, optimizer), (reference, reference_optimizer)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), target).backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
        optimizer.step()
        reference_optimizer.step()
    sources = "\n".join(p.read_text() for p in Path(sol.cache.path()).rglob("model.cpp"))
    for call in ("vednnConvolutionBackwardData(&grad_out", "vednnConvolutionBackwardFilter(&in",
                 "vednnLinearBackwardWeight(16UL, 128UL", "vednnLinearForward(16UL, 128UL"):
        assert call in sources, call
