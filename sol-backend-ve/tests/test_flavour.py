"""The VE flavour: its pragmas and prelude, its toolchain choice, and the code it generates.

The generated code of real models must compile for the VE with LLVM's VE
target (clang-14, which has no VE libc headers: the code includes none), and
the same source compiled for the host with the emulated VE's g++ command
must compute what PyTorch computes.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import sol
from sol.codegen.flavour import MATH_FUNCTIONS
from sol.codegen.nest import Loop, Stmt
from sol.errors import SolBuildError
from sol_backend_ve import toolchain
from sol_backend_ve.backend import VeBackend
from sol_backend_ve.flavour import VeFlavour

#: ELF e_machine of NEC's SX-Aurora VE
EM_VE = 251
needs_clang = pytest.mark.skipif(shutil.which("clang-14") is None,
                                 reason="clang-14 (LLVM's VE target) is not installed: apt-get install clang-14")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ (the emulated VE's compiler) is not installed")
INCLUDE = re.compile(r"^\s*#\s*include\b", re.MULTILINE)


def elf_machine(data: bytes) -> int:
    """e_machine of an ELF file's header."""
    assert data[:4] == b"\x7fELF", "not an ELF file"
    order = "<" if data[5] == 1 else ">"
    return struct.unpack_from(order + "H", data, 18)[0]


# -- the flavour itself ---------------------------------------------------------------------------------------------
def test_backend_supplies_the_ve_flavour():
    flavour = VeBackend().flavour()
    assert isinstance(flavour, VeFlavour) and isinstance(flavour, sol.codegen.Flavour)
    assert flavour.name == "ve"


def test_math_goes_through_sol_ncc_macros():
    flavour = VeFlavour()
    assert flavour.math("exp") == "sol_ncc_exp"
    with pytest.raises(KeyError):
        flavour.math("lgamma")
    prelude = flavour.prelude()
    for fn in MATH_FUNCTIONS:
        assert re.search(rf"^#define sol_ncc_{fn}\(", prelude, re.MULTILINE), fn
    assert not INCLUDE.search(prelude)
    assert "__builtin_expf" in prelude and "struct numeric_limits<float>" in prelude


def test_loops_map_to_openmp_threads_and_nec_vectors():
    inner = Loop("w", "64", [Stmt("y[w] = x[w];")], vector=True)
    nest = [Loop("n", "N", [Loop("c", "32", [inner], parallel=True)], parallel=True)]
    reduction = Loop("k", "100", [Stmt("acc += x[k];")], vector=True, reduction=("+", "acc"))
    flat = [Loop("i", "1000000", [Stmt("y[i] = x[i];")], parallel=True, vector=True)]
    flavour = VeFlavour()
    flavour.annotate(nest + [Loop("r", "8", [reduction], parallel=True)] + flat)
    assert nest[0].pragma == "#pragma omp parallel for collapse(2) schedule(static)"
    assert inner.pragma == "#pragma _NEC ivdep"
    assert reduction.pragma == "#pragma _NEC vector\n#pragma _NEC ivdep"
    # the thread loop is the vector loop: each thread gets whole 256-element vectors
    assert flat[0].pragma == ("#pragma omp parallel for schedule(static, sol_ve_chunk((int64_t)(1000000) - "
                              "(int64_t)(0)))\n#pragma _NEC ivdep")


# -- the toolchain ----------------------------------------------------------------------------------------------------
def _fake_ncc(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    ncc = directory / "nc++"
    ncc.write_text("#!/bin/sh\necho 'nc++ (NCC) 5.0.2' >&2\n")
    ncc.chmod(0o755)
    return ncc


def test_nc_builds_a_ve_shared_object(tmp_path, monkeypatch):
    monkeypatch.delenv(toolchain.EMULATE_ENV, raising=False)
    ncc = _fake_ncc(tmp_path / "bin")
    flavour = VeFlavour(cxx=str(ncc))
    assert flavour.compile_command(Path("m.cpp"), Path("m.so")) == [
        str(ncc), "-O3", "-fopenmp", "-shared", "-fpic", "m.cpp", "-o", "m.so"]
    assert flavour.toolchain_id().startswith(f"ve|nc++|{ncc}|5.0.2|")


def test_emulated_ve_builds_the_same_source_for_the_host(monkeypatch):
    monkeypatch.setenv(toolchain.EMULATE_ENV, "1")
    flavour = VeFlavour(cxx="/nowhere/nc++", emulator_include_dirs=["/opt/vednn/include"],
                        emulator_link_flags=["-L/opt/vednn/lib", "-lvednn"])
    command = flavour.compile_command(Path("m.cpp"), Path("m.so"))
    assert command[:7] == ["g++", "-O2", "-fopenmp", "-shared", "-fPIC", "-Wno-unknown-pragmas", "-std=c++17"]
    assert command[7:] == ["-I/opt/vednn/include", "m.cpp", "-o", "m.so", "-L/opt/vednn/lib", "-lvednn"]
    ident = flavour.toolchain_id()
    assert ident.startswith("ve|emulated|") and "-lvednn" in ident


def test_no_compiler_names_what_to_install(monkeypatch):
    monkeypatch.delenv(toolchain.EMULATE_ENV, raising=False)
    flavour = VeFlavour(cxx="/nowhere/nc++")
    for call in (flavour.toolchain_id, lambda: flavour.compile_command(Path("m.cpp"), Path("m.so"))):
        with pytest.raises(SolBuildError, match=r"nc\+\+.*SOL_VE_EMULATE=1"):
            call()


# -- generated code of real models ------------------------------------------------------------------------------------
def _torch_graph(model, example):
    from sol.passes import run_inference_passes
    from sol.plugins import registry

    return run_inference_passes(registry().frontends["pytorch"].parse(model, (example,), None))


def _zoo_model(name: str):
    torch = pytest.importorskip("torch")
    zoo = pytest.importorskip("sol_frontend_torch.zoo")
    torch.manual_seed(0)
    if name == "transformer_encoder":
        return zoo.transformer_encoder(layers=1, d_model=64, heads=4, feedforward=128).eval(), torch.randn(1, 16, 64)
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    return zoo.classifier(name, num_classes=10, image_size=64).eval(), torch.randn(1, 3, 64, 64)


def _ve_source(graph, profile: bool = False) -> str:
    from sol.codegen.plan import plan
    from sol.codegen.source import generate
    from sol.compiler import model_prefix

    flavour = VeFlavour(emulate=True)
    the_plan = plan(graph, flavour)
    return generate(graph, the_plan.programs, the_plan.memory, flavour, model_prefix(graph), profile)


def _clang_ve(source: str, directory: Path) -> bytes:
    path = directory / "model.cpp"
    path.write_text(source)
    (obj,) = toolchain.compile_objects(path, directory)
    return obj.read_bytes()


@needs_clang
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "transformer_encoder"])
def test_model_compiles_for_the_ve_with_clang(name, tmp_path):
    graph = _torch_graph(*_zoo_model(name))
    source = _ve_source(graph)
    assert not INCLUDE.search(source), "VE code must include no header (LLVM's VE target has no VE libc headers)"
    assert "#pragma omp parallel for" in source and "#pragma _NEC ivdep" in source
    assert "sol_x86_" not in source and "std::exp" not in source
    exported = re.findall(r'^extern "C" [^\n]*\(([^)]*)\)', source, re.MULTILINE)
    assert exported and not any(re.search(r"\bbool\b", args) for args in exported)
    assert elf_machine(_clang_ve(source, tmp_path)) == EM_VE


@needs_clang
def test_profiled_code_declares_its_own_clock(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    source = _ve_source(_torch_graph(model, torch.randn(1, 3, 8, 8)), profile=True)
    assert "sol_profile_clock" in source and not INCLUDE.search(source)
    assert elf_machine(_clang_ve(source, tmp_path)) == EM_VE


# -- the emulated VE's build runs the VE source on the host --------------------------------------------------------
def _run_emulator_build(model, example, tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    from sol.compiler import model_prefix
    from sol.runtime import CompiledModel

    graph = _torch_graph(model, example)
    source = tmp_path / "model.cpp"
    source.write_text(_ve_source(graph))
    library = tmp_path / "model.so"
    # the emulated VE's extras link its libvednn, which the flavour's Conv/Linear calls (sol_backend_ve.vednn)
    command = toolchain.emulator_command(source, library, *VeFlavour(emulate=True).emulator_extras())
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = CompiledModel(graph, library, model_prefix(graph))
    params = {name: np.asarray(t.data) for name, t in graph.params.items()}
    (got,) = compiled.run_numpy([example.numpy()], params)
    return got, model(example).detach().numpy()


@needs_gxx
def test_emulator_build_of_a_cnn_matches_torch(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.AvgPool2d(2),
        torch.nn.Conv2d(8, 8, 3, groups=2), torch.nn.GELU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(8 * 3 * 3, 10), torch.nn.Softmax(dim=1),
    ).eval()
    got, want = _run_emulator_build(model, torch.randn(2, 3, 16, 16), tmp_path)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@needs_gxx
def test_emulator_build_of_a_transformer_encoder_matches_torch(tmp_path):
    model, example = _zoo_model("transformer_encoder")
    got, want = _run_emulator_build(model, example, tmp_path)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


@needs_gxx
def test_emulator_build_of_a_parallel_vector_loop_matches_torch(tmp_path):
    """A flat elementwise Cluster: one loop is both the thread and the vector loop (chunks of whole vectors)."""
    torch = pytest.importorskip("torch")

    class Elementwise(torch.nn.Module):
        def forward(self, x):
            return torch.exp(x) * 2 + torch.tanh(x) - torch.abs(x).sqrt()

    model, example = Elementwise(), torch.randn(100_003)
    assert "sol_ve_chunk(" in _ve_source(_torch_graph(model, example))
    got, want = _run_emulator_build(model, example, tmp_path)
    # exp*2 + tanh - sqrt cancels near 0, and eager's float32 kernels differ per thread (vectorised body, scalar
    # tail): the yardstick is eager float32's own error against float64, per element
    exact = model(example.double()).numpy()
    assert np.all(np.abs(got - exact) <= 2 * np.abs(want - exact) + 4e-6 * np.abs(exact) + 1e-6)
