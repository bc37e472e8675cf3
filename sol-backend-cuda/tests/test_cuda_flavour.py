"""The CUDA flavour without a GPU: kernel mapping, launch configuration, argument marshalling, the nvcc command,
and (where nvcc is installed) the CUDA source of the zoo's resnet18, mobilenet_v2, MLP and transformer encoder
and of every op of the registry compiles for sm_90.

nvcc is slow (10-20 s per model): every source is compiled once per session, two at a time.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import sol
from sol.codegen.nest import Loop, Stmt, nest
from sol.errors import SolBuildError, SolConfigError
from sol.ir import BATCH, Dim, Graph, Purpose
from sol_backend_cuda import launch_plan as kmap
from sol_backend_cuda.backend import CudaBackend
from sol_backend_cuda.flavour import CudaFlavour, gencode_flags, parse_cc
from sol_backend_cuda.toolkit import find_nvcc

NVCC = find_nvcc("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed: the CUDA source is "
                                                      "generated and planned, but not compiled")
HOST = {"t_x": "const float*", "t_y": "float*", "t_w": "const float*", "N": "int64_t", "sol_seed_value": "int"}


# -- planning: kernels, launch configuration, arguments ------------------------------------------------------------
def test_backend_returns_the_cuda_flavour():
    flavour = CudaBackend().flavour()
    assert isinstance(flavour, CudaFlavour)
    assert flavour.name == "cuda" and flavour.source_suffix == ".cu"
    assert CudaFlavour(dnn=False).dnn is None  # library-free: every layer generated
    assert flavour.math("exp") == "sol_cuda_exp"


def test_elementwise_nest_is_one_thread_per_element():
    body = [Stmt("t_y[i0*64 + i1] = t_x[i0*64 + i1] + t_w[i1];")]
    (k,) = kmap.plan_kernels(nest(["i0", "i1"], ["N", "64"], body), "k", HOST)
    assert k.mode == "elementwise"
    assert [(lp.var, lp.count) for lp in k.loops] == [("i0", "N"), ("i1", "64")]
    assert (k.threads, k.items_per_block) == (256, 256)
    assert k.work() == "(N) * (64)"
    # arguments: exactly the host variables the code names, in first-use order, typed as declared
    assert [(p.ctype, p.name) for p in k.params] == [("float*", "t_y"), ("const float*", "t_x"),
                                                     ("const float*", "t_w"), ("int64_t", "N")]
    launch = "\n".join(kmap.launch_lines(k))
    assert "const int64_t sol_items = (N) * (64);" in launch
    assert "const int sol_threads = sol_cuda_threads(sol_items, 1);" in launch
    assert "if (sol_items > 0) k<<<sol_cuda_blocks(sol_items, sol_threads), sol_threads, 0, sol_stream>>>(sol_items, " \
        "t_y, t_x, t_w, N);" in launch
    head = "\n".join(kmap.kernel_head(k))
    assert "static __global__ void __launch_bounds__(256) k(const int64_t sol_items, float* t_y, const float* t_x, " \
           "const float* t_w, int64_t N)" in head
    assert "sol_item += sol_stride" in head  # grid-stride: any size on any grid
    assert "const int64_t i1 = sol_rest % (64); sol_rest /= (64);" in head and "const int64_t i0 = sol_rest;" in head


def test_reduction_runs_on_a_warp_with_shuffles():
    inner = Loop("k", "768", [Stmt("acc += t_x[i0 * 768 + k] * t_w[o * 768 + k];")], vector=True,
                 reduction=("+", "acc"))
    body = [Stmt("float acc = 1.5f;"), inner, Stmt("t_y[i0 * 256 + o] = acc;")]
    (k,) = kmap.plan_kernels(nest(["i0", "o"], ["N", "256"], body, vector_last=False), "lin", HOST)
    assert k.mode == "warp" and (k.threads, k.items_per_block) == (256, 8)
    codes = [n.code for n in k.body if isinstance(n, Stmt)]
    # the start value counts once (lane 0), the partial sums are combined by a butterfly every lane ends with
    assert codes == ["float acc = 1.5f;", "if (sol_lane != 0) acc = 0;", "acc = sol_cuda_warp_sum(acc);",
                     "t_y[i0 * 256 + o] = acc;"]
    loop = next(n for n in k.body if isinstance(n, Loop))
    assert loop.start == "(0) + ((sol_lane - (0)) & 31)" and loop.step == "32"
    launch = "\n".join(kmap.launch_lines(k))
    assert "sol_cuda_threads(sol_items, 32);" in launch and "sol_cuda_blocks(sol_items, sol_threads / 32), sol_threads" in launch
    assert "  const int sol_lane = (int)(threadIdx.x & 31);" in kmap.kernel_head(k)


def test_several_reduction_variables_are_each_combined_over_the_warp():
    """A batch norm gradient's two sums over a channel (one loop, ``reduction=("+", "sdy, sdyx")``)."""
    inner = Loop("s", "3136", [Stmt("const double g = t_x[c * 3136 + s];"), Stmt("sdy += g;"),
                               Stmt("sdyx += g * t_w[c * 3136 + s];")], vector=True, reduction=("+", "sdy, sdyx"))
    body = [Stmt("double sdy = 0, sdyx = 0;"), Loop("n", "N", [inner]), Stmt("t_y[c] = sdy * sdyx;")]
    (k,) = kmap.plan_kernels(nest(["c"], ["64"], body, vector_last=False), "bn", HOST)
    assert k.mode == "warp"
    outer = next(n for n in k.body if isinstance(n, Loop))
    # every variable: the lanes but 0 restart from 0 before the loop, the butterfly after it (the loop's place
    # matters: a reset after the loop dropped the lanes' partial sums, which the first H100 run of the batch norm
    # gradient showed as 10x eager's error)
    sequence = [n.code if isinstance(n, Stmt) else "<lane loop>" for n in outer.body]
    assert sequence == ["if (sol_lane != 0) sdy = 0;", "if (sol_lane != 0) sdyx = 0;", "<lane loop>",
                        "sdy = sol_cuda_warp_sum(sdy);", "sdyx = sol_cuda_warp_sum(sdyx);"]


def test_batch_norm_training_gradient_runs_a_warp_per_channel():
    """One thread per channel walked N*H*W elements twice (resnet18's training step ran 21x slower than eager)."""
    from sol.compiler import generate_source
    from sol.ir import Purpose as P

    g = Graph("bn_grad")
    shape = [Dim(BATCH, P.N), Dim(8, P.C), Dim(12, P.S), Dim(12, P.S)]
    dy, x = g.add_input("dy", shape), g.add_input("x", shape)
    mean, invstd = (g.add_input(n, [Dim(8, P.C)]) for n in ("mean", "invstd"))
    w = g.add_input("w", [Dim(8, P.C)])
    outs = g.add_layer("batch_norm_train_grad", [dy, x, mean, invstd, w], {}, name="bn.grad")
    g.outputs = list(outs)
    source = generate_source(g, CudaFlavour(cc="90", nvcc=NVCC or "nvcc", dnn=False))
    head = source[source.index("(batch_norm_train_grad)"):]
    assert head.splitlines()[1].startswith("// warp: one warp per item")
    assert "sdy = sol_cuda_warp_sum(sdy);" in head and "sdyx = sol_cuda_warp_sum(sdyx);" in head


def test_max_reduction_needs_no_reset():
    inner = Loop("k", "100", [Stmt("m = sol_max<float>(m, t_x[i0 * 100 + k]);")], vector=True, reduction=("max", "m"))
    body = [Stmt("float m = -INFINITY;"), inner, Stmt("t_y[i0] = m;")]
    (k,) = kmap.plan_kernels(nest(["i0"], ["N"], body, vector_last=False), "mx", HOST)
    assert k.mode == "warp"
    assert [n.code for n in k.body if isinstance(n, Stmt)][1] == "m = sol_cuda_warp_max(m);"


def test_private_row_owned_by_lanes_stays_on_a_warp():
    """A convolution's row of accumulators: only touched in lane loops at the loop's index (lo differs per loop)."""
    body = [Stmt("alignas(64) float acc[56];"),
            Loop("r", "56", [Stmt("acc[r] = 0;")], vector=True),
            Loop("ic", "64", [Loop("ow", "hi", [Stmt("acc[ow] += t_x[ic * 56 + ow] * t_w[ic];")], start="lo",
                                   vector=True)]),
            Loop("ow", "56", [Stmt("t_y[o0 * 56 + ow] = acc[ow];")], vector=True)]
    (k,) = kmap.plan_kernels(nest(["o0"], ["N"], body, vector_last=False), "conv", HOST)
    assert k.mode == "warp"
    # lane l owns the indices i % 32 == l in every loop, whatever the loop's start
    starts = [lp.start for lp in kmap._lane_loops(k.body)]
    assert starts == ["(0) + ((sol_lane - (0)) & 31)", "(lo) + ((sol_lane - (lo)) & 31)",
                      "(0) + ((sol_lane - (0)) & 31)"]


def test_column_reduction_with_accumulators_at_the_offset_from_the_start_runs_on_a_warp():
    """A bias gradient (dy [rows, 768] summed over the rows) keeps 64 accumulators per item, indexed from the block's
    first column (``acc[k - j0]``): on a thread per item, 12 threads summed 2048 rows each (the transformer's training
    step ran 22x slower than eager). A warp shares the block out: lane l owns the accumulators l, l + 32."""
    update = Loop("k", "j1", [Stmt("acc[k - j0] += t_x[r * 768 + k];")], start="j0", vector=True)
    body = [Stmt("const int64_t j0 = cb * 64, j1 = j0 + 64 < 768 ? j0 + 64 : 768;"), Stmt("double acc[64];"),
            Loop("q", "64", [Stmt("acc[q] = 0;")], vector=True),
            Loop("r", "N", [update]),
            Loop("k", "j1", [Stmt("t_y[k] = (float)acc[k - j0];")], start="j0", vector=True)]
    (k,) = kmap.plan_kernels(nest(["cb"], ["12"], body, vector_last=False), "colsum", HOST)
    assert k.mode == "warp"
    starts = [lp.start for lp in kmap._lane_loops(k.body)]
    assert starts == ["(0) + ((sol_lane - (0)) & 31)", "(j0) + sol_lane", "(j0) + sol_lane"]


def test_a_private_array_indexed_both_ways_in_one_loop_takes_a_thread_per_item():
    body = [Stmt("float acc[64];"), Loop("q", "64", [Stmt("acc[q] = 0;")], vector=True),
            Loop("k", "j1", [Stmt("acc[k - j0] += acc[k];")], start="j0", vector=True),
            Stmt("t_y[o] = acc[0];")]
    (k,) = kmap.plan_kernels(nest(["o"], ["N"], body, vector_last=False), "mixed", HOST)
    assert k.mode == "thread"


def test_private_array_read_outside_lane_loops_takes_a_thread_per_item():
    body = [Stmt("float sc[128];"), Loop("s", "128", [Stmt("sc[s] = t_x[s];")], vector=True),
            Loop("s", "128", [Stmt("t_y[l * 128 + s] = sc[127 - s];")])]
    (k,) = kmap.plan_kernels(nest(["l"], ["N"], body, vector_last=False), "att", HOST)
    assert k.mode == "thread" and k.items_per_block == 256


def test_memory_updated_outside_lane_loops_takes_a_thread_per_item():
    body = [Loop("k", "64", [Stmt("t_y[i0] = t_x[k];")], vector=True), Stmt("t_y[i0] += 1;")]
    (k,) = kmap.plan_kernels(nest(["i0"], ["N"], body, vector_last=False), "rmw", HOST)
    assert k.mode == "thread"


def test_short_vector_loops_take_a_thread_per_item():
    body = [Loop("c", "3", [Stmt("t_y[i0 * 3 + c] = t_x[c];")], vector=True), Stmt("t_y[i0] = 0;")]
    (k,) = kmap.plan_kernels(nest(["i0"], ["N"], body, vector_last=False), "short", HOST)
    assert k.mode == "thread"


def test_no_parallel_loop_at_the_top_runs_in_one_thread():
    nodes = [Stmt("float s = 0;"), Loop("i", "N", [Stmt("s += t_x[i];")]), Stmt("t_y[0] = s;")]
    (k,) = kmap.plan_kernels(nodes, "total", HOST)
    assert k.mode == "serial" and (k.threads, k.items_per_block) == (1, 1)
    assert "k<<<" not in "\n".join(kmap.launch_lines(k)) and "total<<<1, 1, 0, sol_stream>>>" in \
        "\n".join(kmap.launch_lines(k))


def test_sequential_parallel_loops_are_kernels_in_order():
    first = Loop("i", "N", [Stmt("t_y[i] = t_x[i];")], parallel=True, vector=True)
    second = Loop("j", "N", [Stmt("t_y[j] *= 2;")], parallel=True, vector=True)
    kernels = kmap.plan_kernels([first, second], "two", HOST)
    assert [(k.name, k.mode) for k in kernels] == [("two_0", "elementwise"), ("two_1", "elementwise")]


def test_inner_extent_depending_on_an_outer_index_is_not_flattened():
    outer = Loop("i", "N", [Loop("j", "i + 1", [Stmt("t_y[i * 64 + j] = 0;")], parallel=True, vector=True)],
                 parallel=True)
    (k,) = kmap.plan_kernels([outer], "tri", HOST)
    assert [lp.var for lp in k.loops] == ["i"]


def test_host_variables_from_the_pointer_declarations():
    lines = ["const float* t_x = (const float*)(inputs[0]);  // x [N, 3] (input)",
             "float* t_y = (float*)((char*)workspace + INT64_C(0));  // y [N, 3] (workspace)",
             "int64_t* t_i = (int64_t*)(outputs[0]);  // i [N] (output)"]
    assert kmap.host_variables(lines) == {"t_x": "const float*", "t_y": "float*", "t_i": "int64_t*"}


# -- build: compute capabilities, nvcc command, cache key, failed builds ------------------------------------------
def test_compute_capabilities_parse():
    assert parse_cc("90") == ["90"]
    assert parse_cc("9.0, 8.0") == ["80", "90"]
    assert parse_cc("sm_90a,90,80") == ["80", "90", "90a"]
    with pytest.raises(SolConfigError, match="cuda::cc"):
        parse_cc("hopper")


def test_a_list_builds_a_fat_binary():
    assert gencode_flags(["80", "90"]) == ["-gencode", "arch=compute_80,code=sm_80", "-gencode",
                                           "arch=compute_90,code=sm_90", "-gencode", "arch=compute_90,code=compute_90"]


def _fake_nvcc(tmp_path: Path, fail: bool = False) -> str:
    script = tmp_path / "nvcc"
    action = "echo 'model.cu(1): error: broken' >&2; exit 2" if fail else 'touch "${@: -1}"'
    script.write_text("#!/bin/bash\nif [ \"$1\" = --version ]; then echo 'Cuda compilation tools, release 13.0, "
                      f"V13.0.88'; exit 0; fi\n{action}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_default_cc_is_the_devices_else_90(monkeypatch):
    from sol_backend_cuda import flavour as module

    monkeypatch.setattr(module, "device_cc", lambda: None)
    assert CudaFlavour().ccs == ["90"]
    monkeypatch.setattr(module, "device_cc", lambda: "80")
    assert CudaFlavour().ccs == ["80"]
    sol.config["cuda::cc"] = "80,90"
    try:
        assert CudaFlavour().ccs == ["80", "90"]
    finally:
        del sol.config["cuda::cc"]


def test_compile_command_and_cache_key(tmp_path):
    from sol.compiler import cache_key

    nvcc = _fake_nvcc(tmp_path)
    flavour = CudaFlavour(cc="80,90", nvcc=nvcc, dnn=False)
    command = flavour.compile_command(Path("m.cu"), Path("m.so"))
    assert command[0] == nvcc and command[-3:] == ["m.cu", "-o", "m.so"]
    for flag in ("-O3", "-std=c++17", "-shared", "arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90"):
        assert flag in command
    assert command[command.index("--compiler-options") + 1] == "-fPIC"
    g = Graph("tiny")
    x = g.add_input("x", [Dim(BATCH, Purpose.N), Dim(4, Purpose.C)])
    g.outputs.append(g.add_layer("relu", [x])[0])
    keys = {cache_key(g, CudaFlavour(cc=cc, nvcc=nvcc, dnn=False)) for cc in ("80", "90", "80,90")}
    assert len(keys) == 3
    if CudaFlavour(nvcc=nvcc).dnn is not None:  # library calls or not: different code, different key
        assert cache_key(g, CudaFlavour(cc="90", nvcc=nvcc)) not in keys


def test_failed_build_keeps_source_and_log(tmp_path):
    from sol.codegen.build import build

    flavour = CudaFlavour(cc="90", nvcc=_fake_nvcc(tmp_path, fail=True))
    with pytest.raises(SolBuildError, match=r"Source kept at .*model\.cu") as info:
        build("// the source\n", flavour, tmp_path / "out", "tiny")
    kept = Path(str(info.value).split("Source kept at ")[1].split(";")[0]).parent
    assert (kept / "model.cu").read_text() == "// the source\n"
    assert "error: broken" in (kept / "build.log").read_text()


def test_missing_nvcc_is_a_build_error(monkeypatch):
    from sol_backend_cuda import flavour as module

    monkeypatch.setattr(module, "find_nvcc", lambda configured: None)
    with pytest.raises(SolBuildError, match="nvcc"):
        CudaFlavour(cc="90").compile_command(Path("m.cu"), Path("m.so"))


# -- generated source of real models, compiled by nvcc ---------------------------------------------------------------
MODELS = ("resnet18", "mobilenet_v2", "mlp", "transformer_encoder")


def _model_graph(name: str):
    pytest.importorskip("torch")
    zoo = pytest.importorskip("sol_frontend_torch.zoo")
    if name not in ("mlp", "transformer_encoder"):
        try:
            zoo.import_torchvision()
        except ImportError as exc:
            pytest.skip(f"torchvision is not installed ({exc})")
    from sol.passes import run_inference_passes
    from sol.plugins import registry

    model, example = zoo.build(name)
    return run_inference_passes(registry().frontends["pytorch"].parse(model, (example,), None))


def _source(graph, flavour: type[CudaFlavour] = CudaFlavour) -> str:
    from sol.compiler import generate_source

    return generate_source(graph, flavour(cc="90", nvcc=NVCC))


class _ScatteringCuda(CudaFlavour):
    """Pooling gradients as the CPU flavours run them (a device-heap plane per (n, c) thread), the kernels that
    exercise the device-heap machinery: the CUDA flavour itself gathers instead (no scratch)."""

    gathers_pool_grads = False


def _op_graphs() -> dict[str, Graph]:
    """sol-core's per-op test graphs (every op of the registry), as its codegen test builds them."""
    tests = Path(__file__).resolve().parents[2] / "sol-core" / "tests"
    if not (tests / "test_codegen_ops.py").exists():
        pytest.skip("sol-core's tests are not in this checkout")
    sys.path.insert(0, str(tests))
    try:
        import test_codegen_ops as ops  # noqa: PLC0415
    finally:
        sys.path.remove(str(tests))
    return {f"ops_{group}": make().graph for group, make in ops.GROUPS.items()}


def _compile_all(sources: dict[str, str], directory: Path) -> dict[str, subprocess.CompletedProcess | None]:
    """Compile every source, two nvcc at a time (each is mostly single-threaded)."""
    flavour = CudaFlavour(cc="90", nvcc=NVCC)
    results: dict[str, subprocess.CompletedProcess | None] = {}
    running: list[tuple[str, subprocess.Popen]] = []
    workers = max(1, min(2, os.cpu_count() or 1))

    def reap(item: tuple[str, subprocess.Popen]) -> None:
        name, proc = item
        out, _ = proc.communicate()
        results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    for name, text in sources.items():
        src = directory / f"{name}.cu"
        src.write_text(text)
        command = flavour.compile_command(src, directory / f"{name}.so")
        running.append((name, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                               text=True)))
        if len(running) >= workers:
            reap(running.pop(0))
    for item in running:
        reap(item)
    return results


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[dict[str, str], dict[str, subprocess.CompletedProcess | None], Path]:
    if NVCC is None:
        pytest.skip("nvcc (CUDA toolkit) is not installed")
    directory = tmp_path_factory.mktemp("cuda-build")
    sources = {name: _source(_model_graph(name)) for name in MODELS}
    sources.update({name: _source(graph) for name, graph in _op_graphs().items()})
    return sources, _compile_all(sources, directory), directory


@needs_nvcc
@pytest.mark.parametrize("name", MODELS)
def test_model_source_compiles_for_sm90(built, name):
    sources, results, directory = built
    result = results[name]
    assert result is not None and result.returncode == 0, f"nvcc failed for {name}:\n{result.stdout[-3000:]}"
    assert (directory / f"{name}.so").stat().st_size > 0
    source = sources[name]
    # generated kernels, or (the MLP with cuBLAS found: Linear + ReLU are cuBLASLt calls with epilogues) only calls
    assert ("__global__" in source and "<<<" in source) or "if (sol_lt_run(" in source
    # launches on the caller's stream and never waits: only <prefix>_status synchronises (the stream it is given)
    assert "void* stream)" in source and source.count("cudaStreamSynchronize") == 1
    assert "cudaDeviceSynchronize" not in source


@needs_nvcc
def test_every_op_of_the_registry_compiles_for_sm90(built):
    sources, results, _ = built
    failed = {name: r.stdout[-2000:] for name, r in results.items() if name.startswith("ops_") and r.returncode}
    assert not failed, "nvcc failed:\n" + "\n".join(f"== {n}\n{out}" for n, out in failed.items())
    assert len([n for n in sources if n.startswith("ops_")]) >= 10


def test_device_heap_scratch_is_checked_in_per_thread_kernels(tmp_path):
    """A thread whose ``new`` got no device heap reports SOL_STATUS_SCRATCH instead of writing through null
    (on an H100, resnet18's maxpool gradient exhausted the 8 MB heap: an illegal address that ended the context)."""
    sources = {name: _source(graph, _ScatteringCuda) for name, graph in _op_graphs().items()}
    with_new = {name: text for name, text in sources.items() if " = new " in text}
    assert with_new, "some op group takes per-thread scratch with new (pooling and batch-norm gradients)"
    for name, text in with_new.items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if " = new " in line and "__global__" not in line:
                variable = line.split("*", 1)[1].split("=", 1)[0].strip()
                assert f"if ({variable} == nullptr) {{ sol_fail(&sol_cuda_status_word, SOL_STATUS_SCRATCH); return; }}" \
                    in lines[i + 1], f"{name}: unguarded {line.strip()}"
    if NVCC is None:
        return
    name, text = next(iter(with_new.items()))
    results = _compile_all({name: text}, tmp_path)
    assert results[name] is not None and results[name].returncode == 0, results[name].stdout[-3000:]


def test_kernels_with_scratch_cap_their_grid_and_raise_the_heap():
    """Scratch-taking kernels launch no more blocks than half the device heap holds, and _init raises the heap
    (resnet18's maxpool gradient at batch 4: 256 threads x 100 KB, three times CUDA's 8 MB default)."""
    sources = {name: _source(graph, _ScatteringCuda) for name, graph in _op_graphs().items()}
    with_new = {name: text for name, text in sources.items() if " = new " in text}
    capped = [line for text in with_new.values() for line in text.splitlines() if "sol_cuda_scratch_blocks(sol_items" in line]
    assert capped, "the pooling and batch-norm gradients' launches are capped"
    assert all("sizeof(double) * (int64_t)(" in line for line in capped)
    for text in with_new.values():
        assert "cudaDeviceSetLimit(cudaLimitMallocHeapSize, SOL_CUDA_HEAP_BYTES);" in text
    assert not any("cudaDeviceSetLimit" in text for name, text in sources.items() if name not in with_new)


def test_scratch_cap_arithmetic(tmp_path):
    """The prelude's grid helpers as plain C++ (no GPU): the cap keeps blocks x threads x bytes within half the heap."""
    import shutil

    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    from sol_backend_cuda.flavour import HEAP_BYTES, PRELUDE

    start = PRELUDE.index("// Blocks of a grid-stride launch")
    helpers = PRELUDE[start:]
    program = tmp_path / "cap.cpp"
    program.write_text("#include <cstdint>\n#include <cstddef>\n#include <cstdio>\n" + helpers + """
int main() {
  const int64_t cases[][3] = {{256, 256, 100352}, {4096, 256, 100352}, {1 << 20, 256, 16}, {10, 256, 1 << 30}};
  for (const auto& c : cases) printf("%u %u\\n", sol_cuda_blocks(c[0], 256), sol_cuda_scratch_blocks(c[0], 256, c[1], c[2]));
}
""")
    subprocess.run([cxx, "-std=c++17", str(program), "-o", str(tmp_path / "cap")], check=True)
    rows = [tuple(map(int, line.split())) for line in subprocess.run(
        [str(tmp_path / "cap")], capture_output=True, text=True, check=True).stdout.split("\n") if line]
    half = HEAP_BYTES // 2
    assert rows[0] == (1, 1)                                  # resnet18 b4: one block fits (25.7 MB of 128 MB)
    assert rows[1][0] == 16 and rows[1][1] == half // (256 * 100352) and rows[1][1] * 256 * 100352 <= half  # b64
    assert rows[2] == (4096, 4096)                            # small scratch: uncapped
    assert rows[3] == (1, 1)                                  # more than the heap per thread: one block (guarded)


def test_few_items_take_smaller_blocks_spread_over_the_sms(tmp_path):
    """sol_cuda_threads as plain C++: 256 threads when the items fill the GPU, whole warps down to one otherwise."""
    import shutil

    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    from sol_backend_cuda.flavour import PRELUDE

    helpers = PRELUDE[PRELUDE.index("// Blocks of a grid-stride launch"):]
    program = tmp_path / "threads.cpp"
    program.write_text("#include <cstdint>\n#include <cstddef>\n#include <cstdio>\n" + helpers + """
int main() {
  const int64_t cases[][2] = {{64, 32}, {512, 32}, {24576, 32}, {1024, 1}, {100000, 1}, {1, 1}, {3000, 32}};
  for (const auto& c : cases) { const int t = sol_cuda_threads(c[0], c[1]);
    printf("%d %u\\n", t, sol_cuda_blocks(c[0], t / c[1])); }
}
""")
    subprocess.run([cxx, "-std=c++17", str(program), "-o", str(tmp_path / "threads")], check=True)
    rows = [tuple(map(int, line.split())) for line in subprocess.run(
        [str(tmp_path / "threads")], capture_output=True, text=True, check=True).stdout.split("\n") if line]
    assert rows[0] == (32, 64)        # resnet18's 64 batch-norm channels: a warp per block, 64 SMs busy (was 8)
    assert rows[1] == (32, 512)
    assert rows[2] == (256, 3072)     # enough softmax rows: full blocks of 8 warps
    assert rows[3] == (32, 32)        # a thread per item, 1024 items: 32 blocks of a warp
    assert rows[4] == (256, 391)
    assert rows[5] == (32, 1)
    assert rows[6] == (256, 375)      # 3000 warps: 11 per block at 264 blocks, capped at 8
    for threads, _ in rows:
        assert threads % 32 == 0 and 32 <= threads <= kmap.BLOCK_THREADS


def test_precisions_other_than_fp32_are_a_clear_error():
    flavour = CudaFlavour(cc="90", dnn=False)
    assert flavour.precision_missing("fp32") is None and flavour.native_precision() == "fp32"
    assert "no bf16 kernels" in flavour.precision_missing("bf16")
    precision = pytest.importorskip("sol.precision")
    from sol.errors import SolUnsupportedError

    with pytest.raises(SolUnsupportedError, match="cuda:0.*no fp16 kernels"):
        precision.resolve("fp16", flavour, "cuda:0")
    assert precision.resolve("auto", flavour, "cuda:0") == "fp32"


def test_pooling_gradients_gather_without_device_heap_scratch():
    """The CUDA flavour's pooling gradients are a thread per input element (no plane on the device heap, which made
    resnet18's max pool gradient 11.8 ms of a 27 ms training step on an H100); the emulation tests check their
    values."""
    training = _op_graphs()["ops_training"]
    source = _source(training)
    pool_grads = [layer.name for layer in training.layers if layer.op.endswith("pool_grad")]
    assert len(pool_grads) >= 4
    for name in pool_grads:
        header = source.index(f": {name} (")  # the kernel's "// ---- cluster N: name (op)" line
        body = source[header:source.index("// ---- cluster", header)]
        assert " = new " not in body and "double acc = 0;" in body, name
    assert " = new double" in _source(training, _ScatteringCuda)
