"""``sol.deploy(..., device="ve")``: VE-native libraries, and their wrapper checked on the host.

Without nc++ (CI), ``lib::static`` builds an archive of VE objects with
clang-14's VE target: every member must be a VE ELF object. The wrapper
around the model's code (embedded weights, no stdio, no pthreads) is the
same text on the host: compiled there with g++, a C program calls the API
and must get what PyTorch computes.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
import sol
from sol.errors import SolBuildError, SolInputError
from sol_backend_ve import toolchain
from sol_backend_ve.deploy import VeDeployTarget

EM_VE = 251
INCLUDE = re.compile(r"^\s*#\s*include\b", re.MULTILINE)
needs_clang = pytest.mark.skipif(shutil.which("clang-14") is None,
                                 reason="clang-14 (LLVM's VE target) is not installed: apt-get install clang-14 llvm-14")
torch = pytest.importorskip("torch")


def archive_members(data: bytes) -> dict[str, bytes]:
    """The members of a System V / GNU ``ar`` archive (the symbol table and the long-name table left out)."""
    assert data[:8] == b"!<arch>\n", "not an ar archive"
    members, names, offset = {}, b"", 8
    while offset + 60 <= len(data):
        header = data[offset:offset + 60]
        name, size = header[:16].decode().strip(), int(header[48:58].decode().strip())
        body = data[offset + 60:offset + 60 + size]
        offset += 60 + size + (size & 1)
        if name == "//":
            names = body
        elif name not in ("/", "/SYM64/"):
            if name.startswith("/") and name[1:].isdigit():  # a long name: an offset into the "//" table
                start = int(name[1:])
                name = names[start:names.index(b"\n", start)].decode()
            members[name.rstrip("/")] = body
    return members


def elf_machine(data: bytes) -> int:
    assert data[:4] == b"\x7fELF", "not an ELF file"
    return struct.unpack_from("<H" if data[5] == 1 else ">H", data, 18)[0]


def small_cnn():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.AvgPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10),
    ).eval()
    return model, torch.randn(1, 3, 8, 8)


@pytest.fixture
def no_ncc(monkeypatch):
    """Deploy as CI does: no nc++ (a configured path that does not exist)."""
    monkeypatch.setitem(sol.config, "ve::cxx", "/nonexistent/nc++")


@needs_clang
def test_static_archive_holds_ve_objects(no_ncc, tmp_path, capsys):
    model, x = small_cnn()
    result = sol.deploy(model, x, device="ve", target="lib::static", lib_name="libvecnn", path=tmp_path)
    assert result.kind == "static" and result.device_type == "ve"
    members = archive_members(result.library.read_bytes())
    assert members and all(elf_machine(body) == EM_VE for body in members.values()), list(members)
    assert set(result.symbols) == {"sol_predict_init", "sol_predict_seed", "sol_predict", "sol_ext_malloc",
                                   "sol_ext_free"}
    assert "-lomp" in result.link_flags and "-lgomp" not in result.link_flags  # clang's objects call libomp
    assert any("__kmpc" in note and "libomp" in note for note in result.notes)
    header = result.header.read_text()
    assert "void sol_predict(void* ctx, const float* in0, float** out0);" in header
    assert "libvecnn.a" in capsys.readouterr().out


@needs_clang
def test_resnet18_deploys_for_the_ve(no_ncc, tmp_path):
    zoo = pytest.importorskip("sol_frontend_torch.zoo")
    model = zoo.classifier("resnet18", num_classes=10, image_size=32).eval()
    result = sol.deploy(model, torch.randn(1, 3, 32, 32), device="ve", target="lib::static", path=tmp_path)
    members = archive_members(result.library.read_bytes())
    assert members and all(elf_machine(body) == EM_VE for body in members.values())


def test_shared_library_without_nc_names_the_alternative(no_ncc, tmp_path):
    model, x = small_cnn()
    with pytest.raises(SolBuildError, match=r"nc\+\+.*lib::static"):
        sol.deploy(model, x, device="ve", target="lib::shared", path=tmp_path)


def test_weights_stay_embedded(no_ncc, tmp_path):
    model, x = small_cnn()
    with pytest.raises(SolInputError, match="embed"):
        sol.deploy(model, x, device="ve", target="lib::static", path=tmp_path, options={"weights": "file"})


def test_toolchains_of_the_target(no_ncc, tmp_path, monkeypatch):
    target = VeDeployTarget()
    assert target.compiler()[1] == toolchain.CLANG_TARGET
    assert "llvm-ar" in target.tool("ar")
    sdk = tmp_path / "opt" / "nec" / "ve" / "bin"
    sdk.mkdir(parents=True)
    ncc = sdk / "nc++"
    ncc.write_text("#!/bin/sh\necho 'nc++ (NCC) 5.0.2'\n")
    ncc.chmod(0o755)
    monkeypatch.setitem(sol.config, "ve::cxx", str(ncc))
    assert target.compiler() == [str(ncc)]
    assert target.tool("ar") == str(sdk / "nar") and target.tool("objcopy") == str(sdk / "nobjcopy")
    target.check_kind("shared", {"weights": "embedded"})  # nc++ builds shared libraries


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("gcc") is None, reason="g++/gcc are not installed")
def test_ve_wrapper_runs_on_the_host(tmp_path):
    """The VE library's source, built for the host (as the emulated VE would), called from a C program."""
    from sol.codegen.plan import plan
    from sol.codegen.standalone import sources
    from sol.deployment import _parse
    from sol_backend_ve.flavour import VeFlavour

    model, x = small_cnn()
    graph = _parse(model, (x,))
    flavour = VeFlavour(emulate=True, dnn=False)  # deployed libraries are library-free (VeDeployTarget.flavour)
    generated = sources(graph, plan(graph, flavour), flavour, lib_name="libvecnn", func="sol_predict",
                        device_type="ve", kind="static", flags="", weights_file=None,
                        blob_path=tmp_path / "weights.bin")
    assert not INCLUDE.search(generated.source)
    (tmp_path / "libvecnn.cpp").write_text(generated.source)
    (tmp_path / "libvecnn.h").write_text(generated.header)
    x.numpy().astype(np.float32).tofile(tmp_path / "input.bin")
    (tmp_path / "main.c").write_text("""\
#include <stdio.h>
#include "libvecnn.h"
int main(void) {
  float in[3 * 8 * 8];
  FILE* f = fopen("input.bin", "rb");
  if (!f || fread(in, sizeof in, 1, f) != 1) return 2;
  fclose(f);
  float* out = NULL;
  sol_predict(NULL, in, &out);
  sol_predict(NULL, in, &out);  /* twice: the second call reuses the initialised state */
  for (int i = 0; i < 10; ++i) printf("%.8g\\n", out[i]);
  sol_ext_free(out);
  return 0;
}
""")
    subprocess.run(["g++", "-O2", "-fopenmp", "-fPIC", "-fvisibility=hidden", "-Wno-unknown-pragmas", "-std=c++17",
                    "-c", "libvecnn.cpp", "-o", "libvecnn.o"], cwd=tmp_path, check=True)
    subprocess.run(["gcc", "main.c", "libvecnn.o", "-o", "main", "-fopenmp", "-lstdc++", "-lm"], cwd=tmp_path,
                   check=True)
    done = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True, check=True)
    got = np.array([float(v) for v in done.stdout.split()], dtype=np.float32)
    np.testing.assert_allclose(got, model(x).detach().numpy()[0], rtol=1e-4, atol=1e-5)
