"""The CUDA flavour's generated kernels run on the host (`sol_backend_cuda.emulation`: a warp's lanes as fibers
that meet at every shuffle) through the CUDA runtime's OffloadedModel with the stand-in libcudart, against the
numpy reference: every op group of sol-core's codegen test. What a GPU would show of a kernel mapping bug (a lane
taking the wrong iterations, a warp combining its sums in the wrong place) shows here, in CI."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sol.compiler import generate_source, model_prefix
from sol.ir.interpret import run_reference
from sol.records import Device
from sol.runtime import OffloadedModel
from sol_backend_cuda import emulation
from sol_backend_cuda.flavour import CudaFlavour
from sol_backend_cuda.runtime import Cudart, CudaRuntime

CC = shutil.which("cc") or shutil.which("gcc")
HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(CC is None or shutil.which("g++") is None, reason="no host C/C++ compiler")


def _codegen_ops():
    tests = HERE.parents[1] / "sol-core" / "tests"
    if not (tests / "test_codegen_ops.py").exists():
        pytest.skip("sol-core's tests are not in this checkout")
    sys.path.insert(0, str(tests))
    try:
        import _codegen_helpers as helpers  # noqa: PLC0415
        import test_codegen_ops as ops  # noqa: PLC0415
    finally:
        sys.path.remove(str(tests))
    return ops, helpers


@pytest.fixture(scope="module")
def runtime(tmp_path_factory) -> CudaRuntime:
    out = tmp_path_factory.mktemp("fake-cudart")
    library = out / "fake_libcudart.so"
    subprocess.run([CC, "-shared", "-fPIC", "-O1", "-o", str(library), str(HERE / "fake_libcudart.c")], check=True)
    cudart, reason = Cudart.load(str(library))
    assert cudart is not None, reason
    return CudaRuntime(0, cudart)


def _model(graph, runtime, directory: Path) -> OffloadedModel:
    source = generate_source(graph, CudaFlavour(cc="90", nvcc="nvcc", dnn=False))
    library = emulation.build(source, directory / f"{graph.name}.so")
    return OffloadedModel(graph, library, model_prefix(graph), runtime, Device("cuda", 0, "emulated", "cuda", {}))


GROUPS = sorted(_codegen_ops()[0].GROUPS) if (HERE.parents[1] / "sol-core" / "tests").exists() else []


@pytest.mark.parametrize("group", GROUPS)
def test_generated_kernels_compute_the_reference_on_emulated_warps(group, runtime, tmp_path):
    ops, helpers = _codegen_ops()
    cg = ops.GROUPS[group]()
    _check_cases(cg, helpers, runtime, tmp_path, batches=(1, 3))


def _check_cases(cg, helpers, runtime, directory: Path, batches: tuple[int, ...]) -> None:
    """A sol-core CaseGraph built once for emulated CUDA, run at each batch, every case against the reference."""
    params = {name: t.data for name, t in cg.graph.params.items()}
    model = _model(cg.graph, runtime, directory)
    try:
        results = {}
        for batch in batches:
            rng = np.random.default_rng(batch)
            inputs = [feed(batch, rng) for feed in cg.feeds]
            got = model.run_numpy(inputs, params)
            expected = run_reference(cg.graph, inputs, params)
            results[batch] = helpers.Results(dict(zip(cg.cases, zip(got, expected, strict=True), strict=True)))
    finally:
        model.close()
    for case in cg.cases:
        helpers.check(results, case)


def _wide_rows_graph(helpers):
    """Rows longer than a warp (and not multiples of 32), so that lane striding, several reductions per loop and the
    warp's combination are all exercised: the sizes of sol-core's op groups mostly stay under the short-row limit
    (a thread per item)."""
    rng = np.random.default_rng(3)
    cg = helpers.CaseGraph("wide_rows")
    x = cg.input("x", (0, 3, 5, 40), make=lambda s, r: r.standard_normal(s) * 2 + 1)
    dy = cg.input("dy", (0, 3, 5, 40))
    gamma = cg.param("gamma", rng.uniform(0.5, 1.5, 3).astype(np.float32))
    beta = cg.param("beta", rng.standard_normal(3).astype(np.float32))
    _, mean, invstd, _ = cg.case("batch_norm_train", "batch_norm_train", [x, gamma, beta], {"eps": 1e-5})
    cg.case("batch_norm_train_grad", "batch_norm_train_grad", [dy, x, mean, invstd, gamma])
    cg.case("layer_norm", "layer_norm", [x], {"normalized_ndim": 1, "eps": 1e-5})
    cg.case("softmax", "softmax", [x], {"axis": -1})
    cg.case("log_softmax", "log_softmax", [x], {"axis": -1})
    cg.case("reduce_max_row", "reduce_max", [x], {"axes": (3,), "keepdims": False})
    rows = cg.input("rows", (0, 70, 100))  # a bias gradient: the rows summed per column, in blocks of 64 columns
    cg.case("column_sum", "reduce_sum", [rows], {"axes": (0, 1), "keepdims": False})
    cg.case("column_mean", "reduce_mean", [rows], {"axes": (1,), "keepdims": False})
    w = cg.param("w", rng.standard_normal((9, 100)).astype(np.float32))
    cg.case("linear", "linear", [rows, w, cg.param("b", rng.standard_normal(9).astype(np.float32))])
    q = cg.input("q", (0, 2, 7, 40))
    k = cg.input("k", (0, 2, 45, 40))
    keep = cg.input("keep", (0, 1, 1, 45), "bool", make=lambda s, r: np.concatenate(
        [np.ones((*s[:-1], 1), bool), r.random((*s[:-1], s[-1] - 1)) > 0.3], axis=-1))
    cg.case("attention", "attention", [q, k, k], {"scale": None, "is_causal": False})
    cg.case("attention_masked", "attention", [q, k, k, keep], {"scale": 0.2, "is_causal": False})
    return cg


def test_rows_longer_than_a_warp_compute_the_reference(runtime, tmp_path):
    ops, helpers = _codegen_ops()
    cg = _wide_rows_graph(helpers)
    source = generate_source(cg.graph, CudaFlavour(cc="90", nvcc="nvcc", dnn=False))
    assert source.count("// warp: one warp per item") >= 6, "the cases map onto warps (else they test nothing here)"
    _check_cases(cg, helpers, runtime, tmp_path, batches=(1, 2))


def _run_emulated(graph, inputs, params, runtime, directory: Path) -> list[np.ndarray]:
    model = _model(graph, runtime, directory)
    try:
        return model.run_numpy(inputs, params)
    finally:
        model.close()


class _SmallResNet:
    """conv-bn-relu, a residual block, max pool, global average pool and a linear head: the shapes of a CNN's
    training step with rows (40 wide) longer than a warp."""

    @staticmethod
    def build():
        torch = pytest.importorskip("torch")

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                                torch.nn.ReLU())
                self.block = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1, bias=False),
                                                 torch.nn.BatchNorm2d(8))
                self.pool = torch.nn.MaxPool2d(2)
                self.head = torch.nn.Linear(8, 5)

            def forward(self, x):
                y = self.stem(x)
                y = torch.relu(self.block(y) + y)
                return self.head(self.pool(y).mean((2, 3)))

        torch.manual_seed(0)
        return Net().train(), torch.randn(2, 3, 10, 40)


@pytest.mark.parametrize("name", ["small_resnet", "transformer_layer"])
def test_a_training_step_computes_the_reference_on_emulated_warps(name, runtime, tmp_path):
    """A torch model's training graphs (sol.autodiff: the forward with its saved activations, and the backward),
    generated for CUDA and run on emulated warps, against the numpy reference of the same graphs."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sol_frontend_torch")
    from sol.autodiff import derive

    if name == "small_resnet":
        model, x = _SmallResNet.build()
    else:
        torch.manual_seed(0)
        model = torch.nn.TransformerEncoderLayer(48, 4, 96, dropout=0.0, batch_first=True).train()
        x = torch.randn(2, 40, 48)
    from sol_frontend_torch.training import capture_variant

    variant = capture_variant(model, (x,), None, training=True)  # batch statistics, running-stat updates
    graph = variant.graph
    state_outputs = set(range(variant.model_outputs, len(graph.outputs)))
    tg = derive(graph, set(graph.params), set(), non_differentiable=state_outputs)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    params = {n: np.asarray(state[n].detach().numpy(), order="C") if n in state else np.asarray(t.data, order="C")
              for n, t in graph.params.items()}
    inputs = [x.numpy()]
    expected = run_reference(tg.forward, inputs, params)
    got = _run_emulated(tg.forward, inputs, params, runtime, tmp_path)
    for k, (a, b) in enumerate(zip(expected, got, strict=True)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=f"{name}: forward output {k}")
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(np.shape(expected[k])).astype(np.float32) for k in tg.differentiable]
    saved = [expected[s.index] if s.source == "output" else inputs[s.index] for s in tg.saved]
    values = [*grads, *saved]
    reference = run_reference(tg.backward, values, params)
    computed = _run_emulated(tg.backward, values, params, runtime, tmp_path)
    for gname, a, b in zip(tg.param_grads, reference, computed, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-4, err_msg=f"{name}: gradient of {gname}")


@pytest.mark.parametrize("name", ["mobilenet_v2", "googlenet", "efficientnet_b0"])
def test_zoo_inference_matches_eager_on_emulated_warps(name, runtime, tmp_path):
    """Whole zoo models (their inference passes and Clusters, generated kernels only) against eager PyTorch; the
    CNNs at 64x64 to keep CI short. Criterion: max |SOL - eager| <= 1e-4 max(max |eager|, 1)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sol_frontend_torch")
    import sol
    from sol.passes import run_inference_passes
    from sol.plugins import registry
    from sol_frontend_torch.zoo import build, import_torchvision_if_installed

    try:
        import_torchvision_if_installed()
        model, x = build(name)
    except ImportError as exc:
        pytest.skip(f"{name}: {exc}")
    torch.manual_seed(0)
    x = torch.randn(1, 3, 64, 64) if x.dim() == 4 else torch.randn(1, 40, x.shape[-1])
    graph = run_inference_passes(registry().frontends["pytorch"].parse(model.eval(), (sol.input([0, *x.shape[1:]]),),
                                                                      None))
    params = {n: np.asarray(t.data, order="C") for n, t in graph.params.items()}
    (got,) = _run_emulated(graph, [x.numpy()], params, runtime, tmp_path)[:1]
    with torch.no_grad():
        want = model(x).numpy()
    err, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    assert err <= 1e-4 * max(scale, 1.0), f"{name}: max |SOL - eager| = {err:.3e} (scale {scale:.3e})"


def test_batch_norm_training_as_reductions_on_emulated_warps(runtime, tmp_path):
    """What the CUDA flavour runs for batch_norm_train(_grad) (`CudaFlavour.lowers`: means per sample and channel,
    then per channel), generated and run on emulated warps against the fused ops' reference."""
    from sol.codegen.lowering import batch_norm_train_as_reductions, batch_norm_train_grad_as_reductions
    from sol.ir import Dim, Graph, Purpose

    rng = np.random.default_rng(4)
    shape = (4, 6, 9, 40)
    g = Graph("bn_reductions")
    dims = [Dim(shape[0], Purpose.N), Dim(shape[1], Purpose.C), Dim(shape[2], Purpose.S), Dim(shape[3], Purpose.S)]
    x, dy = g.add_input("x", dims), g.add_input("dy", dims)
    w = g.add_param("w", rng.uniform(0.5, 1.5, shape[1]).astype(np.float32))
    b = g.add_param("b", rng.standard_normal(shape[1]).astype(np.float32))
    forward = g.add_layer("batch_norm_train", [x, w, b], {"eps": 1e-5}, name="bn")
    backward = g.add_layer("batch_norm_train_grad", [dy, x, forward[1], forward[2], w], {}, name="bn.grad")
    g.outputs = [*forward, *backward]
    assert all(CudaFlavour(cc="90", nvcc="nvcc", dnn=False).lowers(layer) for layer in g.layers)
    inputs = [(rng.standard_normal(shape) * 2 + 1).astype(np.float32), rng.standard_normal(shape).astype(np.float32)]
    params = {"w": w.data, "b": b.data}
    want = run_reference(g, inputs, params)
    first, second = g.layers
    g.layers = batch_norm_train_as_reductions(first, g) + batch_norm_train_grad_as_reductions(second, g)
    got = _run_emulated(g, inputs, params, runtime, tmp_path)
    for name, a, e in zip(("y", "mean", "invstd", "unbiased", "dx", "dweight", "dbias"), got, want, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4, err_msg=name)


def _column_reductions_graph(helpers):
    """Static column reductions over >= 512 rows (training graphs' bias gradients), which the CUDA flavour runs in
    two stages (sol.codegen.lowering.column_reduction_in_stages): 64, 8 and 32 row groups, keepdims both ways."""
    cg = helpers.CaseGraph("column_reductions")
    for name, shape in (("bias_rows", (8, 96, 100)), ("odd_rows", (600, 3, 70)), ("planes", (4, 256, 5, 3))):
        tensor = cg.graph.add_input(name, helpers.dims(*shape, batch=False), "float32")
        cg.feeds.append(lambda batch, rng, shape=shape: (rng.standard_normal(shape) * 3 + 1).astype(np.float32))
        if name == "bias_rows":
            cg.case("bias_sum", "reduce_sum", [tensor], {"axes": (0, 1), "keepdims": False})
            cg.case("bias_mean_kept", "reduce_mean", [tensor], {"axes": (0, 1), "keepdims": True})
        elif name == "odd_rows":
            cg.case("odd_sum_kept", "reduce_sum", [tensor], {"axes": (0,), "keepdims": True})
        else:
            cg.case("planes_mean", "reduce_mean", [tensor], {"axes": (-4, -3), "keepdims": False})
    return cg


def test_column_reductions_in_two_stages_compute_the_reference(runtime, tmp_path):
    ops, helpers = _codegen_ops()
    cg = _column_reductions_graph(helpers)
    source = generate_source(cg.graph, CudaFlavour(cc="90", nvcc="nvcc", dnn=False))
    for case in ("bias_sum", "bias_mean_kept", "odd_sum_kept", "planes_mean"):
        assert f"{case}.part (" in source and f"{case}.total (" in source, case
    # each lane keeps only its own accumulators: 64 columns / 32 lanes, indexed by the column's offset / 32
    assert "double acc[((64) + 31) / 32];" in source and "double acc[64];" not in source
    assert re.search(r"acc\[\(k\d+ - j0\) / 32\] \+= ", source)
    _check_cases(cg, helpers, runtime, tmp_path, batches=(1,))
