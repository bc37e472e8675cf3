"""Running a library built by ``sol.deploy`` the way a user's C program does.

`run_deployed` writes the inputs to raw files, compiles a small C program
against the deployed header with the target's C compiler, links it with the
flags ``sol.deploy`` reported, runs it (under the target's emulator, e.g.
``qemu-aarch64``, when the target is not this machine) and reads the outputs
back. Backend test suites use it to prove their deploy target end to end::

    from sol.testing.deployment import run_deployed

    result = sol.deploy(model, x, device="arm64", path=tmp_path)
    (out,) = run_deployed(result, [x.numpy()], tmp_path)
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..codegen.standalone_build import c_compiler
from ..deployment import DeployResult, target_for
from ..errors import SolError


class DeployedRunError(SolError):
    """The deployed library could not be driven (no C compiler or emulator, or the program failed)."""



def zoo_and_torch():
    """(sol_frontend_torch.zoo, torch), or skip the test naming what to install."""
    import pytest

    torch = pytest.importorskip("torch", reason="the zoo models need PyTorch (installed with sol-frontend-torch)")
    return pytest.importorskip("sol_frontend_torch.zoo", reason="the zoo models come with sol-frontend-torch"), torch


def tiny_graph():
    """A one-layer graph (relu on float32[1, 4]): the cheapest thing to deploy."""
    from ..ir import Dim, Graph, Purpose

    graph = Graph("tiny")
    (y,) = graph.add_layer("relu", [graph.add_input("x", [Dim(1, Purpose.N), Dim(4, Purpose.C)])], name="relu")
    graph.outputs = [y]
    return graph


def scratch_directory(tmp_path: Path):
    """A directory for one deployment, removed afterwards: the MLP's library alone is 570 MB (pytest keeps tmp_path)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)

def driver_source(result: DeployResult) -> str:
    """A C program: ``driver in0.bin ... out0.bin ... [repeat]`` reads the inputs, calls the network and writes
    the outputs; with ``repeat`` it also prints the median latency of that many further calls."""
    n_in, n_out = len(result.inputs), len(result.outputs)
    func = result.func_name
    lines = [
        "#define _POSIX_C_SOURCE 199309L",
        "#include <stdio.h>", "#include <stdlib.h>", "#include <time.h>",
        f'#include "{result.header.name}"',
        "static void* load(const char* path, size_t bytes) {",
        "  void* data = malloc(bytes ? bytes : 1); FILE* f = fopen(path, \"rb\");",
        "  if (!f || fread(data, 1, bytes, f) != bytes) { fprintf(stderr, \"cannot read %s\\n\", path); exit(2); }",
        "  fclose(f); return data;",
        "}",
        "static void store(const char* path, const void* data, size_t bytes) {",
        "  FILE* f = fopen(path, \"wb\");",
        "  if (!f || fwrite(data, 1, bytes, f) != bytes) { fprintf(stderr, \"cannot write %s\\n\", path); exit(3); }",
        "  fclose(f);",
        "}",
        "static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); "
        "return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }",
        "static int by_value(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; "
        "return (x > y) - (x < y); }",
        "int main(int argc, char** argv) {",
        f"  if (argc < {1 + n_in + n_out}) {{ fprintf(stderr, \"usage: %s inputs... outputs... [repeat]\\n\", argv[0]); "
        "return 1; }",
    ]
    for i, t in enumerate(result.inputs):
        lines.append(f"  const {t.ctype}* in{i} = (const {t.ctype}*)load(argv[{1 + i}], {t.bytes});")
    for i, t in enumerate(result.outputs):
        lines.append(f"  {t.ctype}* out{i} = NULL;")
    args = ", ".join(["NULL", *[f"in{i}" for i in range(n_in)], *[f"&out{i}" for i in range(n_out)]])
    lines += [f"  {func}_init(0);", f"  {func}({args});"]
    for i, t in enumerate(result.outputs):
        lines.append(f"  store(argv[{1 + n_in + i}], out{i}, {t.bytes});")
    lines += [
        f"  const int repeat = argc > {1 + n_in + n_out} ? atoi(argv[{1 + n_in + n_out}]) : 0;",
        "  double* times = (double*)malloc(sizeof(double) * (repeat > 0 ? repeat : 1));",
        "  for (int r = 0; r < repeat; ++r) {",
        *[f"    sol_ext_free(out{i});" for i in range(n_out)],
        f"    const double start = now_ms(); {func}({args}); times[r] = now_ms() - start;",
        "  }",
        "  if (repeat > 0) { qsort(times, repeat, sizeof(double), by_value); "
        "printf(\"median_ms %.4f\\n\", times[repeat / 2]); }",
        *[f"  sol_ext_free(out{i});" for i in range(n_out)],
        "  return 0;",
        "}",
    ]
    return "\n".join(lines) + "\n"


def build_driver(result: DeployResult, directory: Path) -> Path:
    """Compile and link `driver_source` against ``result`` with the target's C compiler."""
    target = target_for(result.device_type)
    cc = c_compiler(target)
    if cc is None:
        raise DeployedRunError(f"no C compiler beside {target.compiler()[0]}: {target.install_hint}")
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / f"{result.func_name}_driver.c"
    program = directory / f"{result.func_name}_driver_{result.device_type}_{result.kind}"
    source.write_text(driver_source(result))
    argv = [*cc, "-O2", f"-I{result.header.parent}", str(source), *result.link_flags, "-o", str(program)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DeployedRunError(f"linking a C program against {result.library} failed:\n$ {' '.join(argv)}\n"
                               f"{done.stdout}{done.stderr}")
    return program


def run_deployed(result: DeployResult, inputs: Sequence[np.ndarray], directory: Path, repeat: int = 0,
                 timeout: float = 1800.0) -> tuple[list[np.ndarray], float | None]:
    """The outputs of the deployed network for ``inputs``, and the median latency in ms of ``repeat`` calls."""
    target = target_for(result.device_type)
    emulator = target.emulator()
    if emulator is None:
        raise DeployedRunError(f"programs built for {result.device_type} cannot run on this machine")
    if emulator and shutil.which(emulator[0]) is None:
        raise DeployedRunError(f"running {result.device_type} programs here needs {emulator[0]}, which is not "
                               "installed (apt install qemu-user)")
    program = build_driver(result, directory)
    files_in = []
    for i, (spec, value) in enumerate(zip(result.inputs, inputs, strict=True)):
        array = np.ascontiguousarray(value, dtype=spec.dtype)
        if array.shape != spec.shape:
            raise DeployedRunError(f"input {i} has shape {list(array.shape)}, the library takes {list(spec.shape)}")
        files_in.append(directory / f"in{i}.bin")
        array.tofile(files_in[-1])
    files_out = [directory / f"out{i}.bin" for i in range(len(result.outputs))]
    argv = [*emulator, str(program), *map(str, files_in), *map(str, files_out)] + ([str(repeat)] if repeat else [])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise DeployedRunError(f"$ {' '.join(argv)} failed with exit code {done.returncode}:\n{done.stderr[-3000:]}")
    outputs = [np.fromfile(path, dtype=spec.dtype).reshape(spec.shape)
               for path, spec in zip(files_out, result.outputs, strict=True)]
    latency = None
    for line in done.stdout.splitlines():
        if line.startswith("median_ms "):
            latency = float(line.split()[1])
    return outputs, latency


#: what a deployed CPU library may need on the machine it ships to (glibc's parts, the GCC runtime, OpenMP)
BASE_RUNTIME = ("libc.so", "libm.so", "libgomp.so", "libstdc++.so", "libgcc_s.so", "ld-linux", "libpthread.so",
                "libdl.so")


def assert_deploys_correctly(model: object, example: object, expected: Sequence[np.ndarray], directory: Path,
                             rtol: float = 1e-4, atol: float = 1e-5, **deploy_kwargs: object) -> DeployResult:
    """Deploy ``model`` for ``example`` (one input), run the library as a C program and compare with ``expected``.

    Also checks what every deployed CPU library promises: it exports exactly its API and needs nothing at run
    time beyond `BASE_RUNTIME` and the libraries shipped beside it.
    """
    import sol

    result: DeployResult = sol.deploy(model, example, path=directory, **deploy_kwargs)  # type: ignore[arg-type]
    func = result.func_name
    assert set(result.symbols) == {func, f"{func}_init", f"{func}_seed", "sol_ext_malloc", "sol_ext_free"}
    if result.kind == "shared":
        shipped = tuple(path.name for path in result.shipped)
        extra = [lib for lib in result.runtime_libraries if not lib.startswith(BASE_RUNTIME) and lib not in shipped]
        assert not extra, f"the deployed library needs {extra} at run time, and they are not shipped beside it"
    array = np.asarray(example.detach().numpy() if hasattr(example, "detach") else example)  # type: ignore[union-attr]
    got, _ = run_deployed(result, [array], directory)
    assert len(got) == len(expected)
    for index, (g, e) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {index} of {result.library}")
    return result
