"""cuBLAS/cuDNN library calls without a GPU: the host-side plans (GEMM arguments, convolution descriptors) checked
against the ops' numpy references, the calls in generated source, and (with nvcc and the [libs] wheels) the source
compiled and linked against the wheels' headers and libraries.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import sol
from sol.codegen.dnn import DnnCall
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.registry import get_op
from sol_backend_cuda import blas, cudnn, libraries
from sol_backend_cuda.dnn_module import CudaDnnModule
from sol_backend_cuda.flavour import CudaFlavour
from sol_backend_cuda.toolkit import find_nvcc

RNG = np.random.default_rng(30)
NVCC = find_nvcc("nvcc")


def _reference(layer, values):
    return get_op(layer.op).reference(values, layer.attrs)[0]


def _dims(shape, batch=False):
    return [Dim(BATCH if batch and i == 0 else s, Purpose.N if i == 0 else Purpose.C) for i, s in enumerate(shape)]


def _concrete(plan: blas.GemmPlan, n: int) -> blas.GemmPlan:
    """The plan at batch ``n`` (its sizes may be expressions of the batch)."""
    values = {}
    for field in blas.GemmPlan.__dataclass_fields__:
        value = getattr(plan, field)
        values[field] = int(value.subs(BATCH, n)) if hasattr(value, "subs") else value
    return blas.GemmPlan(**values)


# -- GEMM plans: the arguments cuBLAS gets, run by numpy against the op's reference ----------------------------------
@pytest.mark.parametrize("rows,features_in,features_out,bias,relu", [(1, 5, 3, True, False), (7, 16, 9, True, True),
                                                                     (4, 3, 8, False, False), (2, 33, 1, False, True)])
def test_linear_plan_computes_the_layer(rows, features_in, features_out, bias, relu):
    g = Graph()
    x = g.add_input("x", _dims([rows, features_in]))
    w = g.add_param("w", RNG.standard_normal((features_out, features_in)).astype(np.float32))
    inputs = [x, w]
    if bias:
        inputs.append(g.add_param("b", RNG.standard_normal(features_out).astype(np.float32)))
    (y,) = g.add_layer("linear", inputs)
    layer = g.layers[-1]
    xv = RNG.standard_normal((rows, features_in)).astype(np.float32)
    expected = _reference(layer, [xv, w.data, *([inputs[2].data] if bias else [])]).astype(np.float64)
    if relu:
        expected = np.maximum(expected, 0)
    plan = blas.plan_linear(layer, "relu" if relu else None)
    operands = {"x": xv, "w": w.data, **({"bias": inputs[2].data} if bias else {})}
    got = plan.emulate(operands)[: rows * features_out].reshape(rows, features_out)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_linear_over_three_dims_flattens_the_rows():
    g = Graph()
    x = g.add_input("x", _dims([2, 3, 4]))
    w = g.add_param("w", RNG.standard_normal((5, 4)).astype(np.float32))
    g.add_layer("linear", [x, w])
    plan = blas.plan_linear(g.layers[-1])
    assert (plan.m, plan.n, plan.k, plan.lda, plan.ldb, plan.ldc) == (5, 6, 4, 4, 4, 5)
    xv = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(plan.emulate({"x": xv, "w": w.data})[:30].reshape(2, 3, 5),
                               _reference(g.layers[-1], [xv, w.data]), rtol=1e-5, atol=1e-5)


def test_linear_grad_weight_plan():
    g = Graph()
    x = g.add_input("x", _dims([6, 4]))
    dy = g.add_input("dy", _dims([6, 3]))
    g.add_layer("linear_grad_weight", [x, dy])
    layer = g.layers[-1]
    xv, dyv = (RNG.standard_normal(s).astype(np.float32) for s in ((6, 4), (6, 3)))
    expected = _reference(layer, [xv, dyv])
    assert expected.shape == (3, 4)
    got = blas.plan_linear_grad_weight(layer).emulate({"x": xv, "dy": dyv})[:12].reshape(3, 4)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape,b_shape,transpose_b", [
    ((3, 4), (4, 5), False),            # mm
    ((2, 3, 4), (2, 4, 5), False),      # bmm
    ((2, 3, 4), (4, 5), False),         # a batch of A times one B (stride 0)
    ((4, 5), (2, 3, 5, 6), False),      # one A times a batch of B
    ((2, 2, 3, 4), (2, 2, 5, 4), True),  # attention's q @ k^T, k read transposed where it lies
    ((1, 3, 4), (2, 4, 2), False),      # a leading 1 broadcasts like a missing dim
])
def test_matmul_plan_computes_the_layer(a_shape, b_shape, transpose_b):
    g = Graph()
    a = g.add_input("a", _dims(a_shape))
    b = g.add_input("b", _dims(b_shape))
    (out,) = g.add_layer("matmul", [a, b], {"transpose_b": transpose_b})
    layer = g.layers[-1]
    av, bv = RNG.standard_normal(a_shape).astype(np.float32), RNG.standard_normal(b_shape).astype(np.float32)
    expected = _reference(layer, [av, bv])
    plan = blas.plan_matmul(layer)
    assert plan is not None
    got = plan.emulate({"a": av, "b": bv})[: expected.size].reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_matmul_with_a_partial_broadcast_stays_generated():
    g = Graph()
    a = g.add_input("a", _dims((2, 1, 3, 4)))
    b = g.add_input("b", _dims((1, 5, 4, 2)))
    g.add_layer("matmul", [a, b])
    assert blas.plan_matmul(g.layers[-1]) is None
    assert not CudaDnnModule().accepts(g.layers[-1])


def test_sizes_of_the_batch_are_c_expressions():
    g = Graph()
    x = g.add_input("x", _dims([0, 8], batch=True))
    w = g.add_param("w", RNG.standard_normal((3, 8)).astype(np.float32))
    g.add_layer("linear", [x, w])
    plan = blas.plan_linear(g.layers[-1])
    assert plan.n == BATCH and _concrete(plan, 5).n == 5


# -- convolution plans: cuDNN's descriptors --------------------------------------------------------------------------
def _conv_graph(x_shape, w_shape, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1, bias=True):
    g = Graph()
    x = g.add_input("x", [Dim(s, p) for s, p in zip(x_shape, (Purpose.N, Purpose.C, Purpose.P, Purpose.P),
                                                         strict=True)], requires_grad=True)
    w = g.add_param("w", RNG.standard_normal(w_shape).astype(np.float32))
    inputs = [x, w] + ([g.add_param("b", RNG.standard_normal(w_shape[0]).astype(np.float32))] if bias else [])
    (y,) = g.add_layer("conv", inputs, {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups})
    return g, g.layers[-1]


@pytest.mark.parametrize("x_shape,w_shape,stride,pad,dilation,groups", [
    ((2, 3, 17, 15), (8, 3, 3, 3), (1, 1), 1, (1, 1), 1),
    ((1, 8, 16, 16), (8, 2, 3, 3), (2, 2), 1, (1, 1), 4),    # grouped, strided
    ((1, 4, 9, 9), (4, 1, 3, 3), (1, 1), 2, (2, 2), 4),      # depthwise, dilated
    ((3, 64, 56, 56), (128, 64, 1, 1), (2, 2), 0, (1, 1), 1),  # resnet's downsample
    ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), 3, (1, 1), 1),  # resnet's stem
])
def test_conv_plan_matches_the_layer(x_shape, w_shape, stride, pad, dilation, groups):
    _, layer = _conv_graph(x_shape, w_shape, stride, ((pad, pad), (pad, pad)), dilation, groups)
    plan = cudnn.plan_conv(layer)
    assert plan is not None and plan.kind == cudnn.FORWARD and plan.bias
    y = layer.outputs[0].shape
    assert (plan.n, plan.c, plan.h, plan.w) == tuple(x_shape)
    assert (plan.k, plan.c // plan.groups, plan.r, plan.s) == tuple(w_shape)
    assert (plan.p, plan.q) == tuple(y[2:]) == plan.output_hw()
    assert plan.pad == (pad, pad) and plan.stride == stride and plan.dilation == dilation and plan.groups == groups


def test_conv_with_asymmetric_padding_or_3d_stays_generated():
    _, layer = _conv_graph((1, 3, 8, 8), (4, 3, 3, 3), padding=((0, 1), (0, 1)))
    assert cudnn.plan_conv(layer) is None and not CudaDnnModule().accepts(layer)
    g = Graph()
    x = g.add_input("x", [Dim(s, Purpose.P) for s in (1, 2, 4, 4, 4)])
    w = g.add_param("w", RNG.standard_normal((2, 2, 1, 1, 1)).astype(np.float32))
    g.add_layer("conv", [x, w], {"stride": (1, 1, 1), "padding": ((0, 0),) * 3, "dilation": (1, 1, 1), "groups": 1})
    assert cudnn.plan_conv(g.layers[-1]) is None


@pytest.mark.parametrize("x_shape,w_shape,stride,pad", [((2, 4, 9, 9), (6, 4, 3, 3), (2, 2), 1),
                                                        ((1, 3, 16, 16), (8, 3, 7, 7), (2, 2), 3),
                                                        ((2, 8, 8, 8), (8, 8, 1, 1), (1, 1), 0)])
def test_conv_gradients_plan_as_the_forward_descriptors(x_shape, w_shape, stride, pad):
    """The training graph's conv_transpose (input gradient) and conv_grad_weight get the forward conv's descriptors."""
    from sol.autodiff import derive

    g, layer = _conv_graph(x_shape, w_shape, stride, ((pad, pad), (pad, pad)), bias=False)
    g.outputs.append(layer.outputs[0])
    backward = derive(g, ["w"], inputs=[0]).backward
    grads = [ly for ly in backward.layers if ly.op in ("conv_grad_weight", "conv_transpose")]
    assert {ly.op for ly in grads} == {"conv_grad_weight", "conv_transpose"}
    forward_plan = cudnn.plan_conv(layer)
    for grad in grads:
        plan = cudnn.plan_conv(grad)
        assert plan is not None, grad
        assert plan.kind == (cudnn.BACKWARD_FILTER if grad.op == "conv_grad_weight" else cudnn.BACKWARD_DATA)
        same = ("c", "h", "w", "k", "r", "s", "pad", "stride", "dilation", "groups", "p", "q")
        assert {f: getattr(plan, f) for f in same} == {f: getattr(forward_plan, f) for f in same}


# -- generated source: the calls, the workspace, constants -----------------------------------------------------------
needs_libs = pytest.mark.skipif(libraries.found() is None, reason=libraries.missing_reason())


def _small_model_source():
    torch = pytest.importorskip("torch")
    pytest.importorskip("sol_frontend_torch")
    from sol.compiler import generate_source
    from sol.passes import run_inference_passes
    from sol.plugins import registry

    class Small(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.grouped = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=4)
            self.fc = torch.nn.Linear(8 * 8 * 8, 16)
            self.head = torch.nn.Linear(16, 4, bias=False)

        def forward(self, x):
            y = self.grouped(torch.relu(self.conv(x)))
            z = self.head(torch.relu(self.fc(y.flatten(1))))
            a = z.view(-1, 2, 2)
            return (a @ a).flatten(1) @ torch.ones(4, 3)

    graph = run_inference_passes(registry().frontends["pytorch"].parse(Small().eval(), (sol.input([0, 3, 16, 16]),),
                                                                      None))
    flavour = CudaFlavour(cc="90", nvcc=NVCC, dnn=True)
    return generate_source(graph, flavour), flavour


@needs_libs
def test_generated_source_calls_the_libraries(tmp_path):
    source, flavour = _small_model_source()
    assert flavour.dnn is not None
    calls = [line.strip() for line in source.splitlines() if line.strip().startswith("if (sol_")]
    convs = [c for c in calls if c.startswith("if (sol_conv_run(")]
    linears = [c for c in calls if c.startswith("if (sol_lt_run(")]
    gemms = [c for c in calls if c.startswith("if (sol_gemm(")]
    assert len(convs) == 2 and len(linears) == 2 and len(gemms) == 2
    # every call gets the call's math word (TF32 or not as the caller's framework says), the entry points take it
    assert all(", sol_library_workspace, sol_fp32_math, " in c for c in convs + linears + gemms)
    assert "int64_t batch, void* stream, int sol_fp32_math) {" in source
    assert "SOL_CONV_FORWARD" in convs[0] and convs[0].endswith("// conv (conv + relu)")
    assert ", 1, (const float*)" in convs[0] and ", 4, 8, 8, 0, (const float*)" in convs[1]  # relu; groups, no relu
    assert "CUBLASLT_EPILOGUE_RELU_BIAS" in linears[0] and "CUBLASLT_EPILOGUE_DEFAULT" in linears[1]
    assert "sol_device_address(c_" in gemms[1]  # the constant matrix: its device address, not the host shadow
    assert "return sol_library_workspace_offset(N) + (int64_t)SOL_LIBRARY_WORKSPACE;" in source
    assert source.count("sol_dnn_init()") == 6  # once per call in _init (idempotent)
    # the relus went into the calls: no kernel of their own
    assert "relu" not in " ".join(line for line in source.splitlines() if line.startswith("// ---- cluster")
                                  and "DNN" not in line)


@needs_libs
@pytest.mark.parametrize("autotuning", [True, False])
def test_autotuning_times_convolution_algorithms_on_the_gpu(autotuning):
    """sol.config["autotuning"]: cuDNN's algorithms are timed (cudnnFind*Ex) at the first call of a batch size
    instead of ranked by its heuristics; part of the cache key, so the two builds are separate artifacts."""
    sol.config["autotuning"] = autotuning
    try:
        flavour = CudaFlavour(cc="90", nvcc=NVCC or "nvcc", dnn=True)
        source = flavour.prelude()
        key = flavour.dnn.key()
    finally:
        del sol.config["autotuning"]
    assert f"#define SOL_CUDA_AUTOTUNE {int(autotuning)}" in source
    for find in ("cudnnFindConvolutionForwardAlgorithmEx", "cudnnFindConvolutionBackwardDataAlgorithmEx",
                 "cudnnFindConvolutionBackwardFilterAlgorithmEx"):
        assert find in source  # compiled only where SOL_CUDA_AUTOTUNE is 1
    assert f"|autotune {int(autotuning)}" in key


@needs_libs
@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: pip install \"sol-backend-cuda[toolchain]\"")
def test_library_calls_compile_and_link_against_the_wheels(tmp_path):
    source, flavour = _small_model_source()
    (tmp_path / "m.cu").write_text(source)
    done = subprocess.run(flavour.compile_command(tmp_path / "m.cu", tmp_path / "m.so"), capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    needed = subprocess.run(["readelf", "-d", str(tmp_path / "m.so")], capture_output=True, text=True).stdout
    for soname in ("libcublasLt.so.13", "libcublas.so.13", "libcudnn.so.9"):
        assert f"[{soname}]" in needed
    assert "RUNPATH" in needed or "RPATH" in needed


@needs_libs
@pytest.mark.parametrize("mask", [None, "bool", "causal"])
def test_attention_runs_as_two_gemms_around_a_softmax_on_warps(mask):
    """The fused attention loop keeps a K^T per work item: on a GPU one thread per (batch, head) with 32 KB of local
    memory. The module lowers attention (masks too) to cuBLAS strided-batch products and a softmax kernel."""
    from sol.compiler import generate_source

    g = Graph("attention")
    shape = [Dim(BATCH, Purpose.N), Dim(4, Purpose.C), Dim(16, Purpose.S), Dim(8, Purpose.C)]
    q, k, v = (g.add_input(n, shape) for n in "qkv")
    inputs = [q, k, v]
    if mask == "bool":
        inputs.append(g.add_input("m", [Dim(BATCH, Purpose.N), Dim(1, Purpose.C), Dim(1, Purpose.S),
                                        Dim(16, Purpose.S)], dtype="bool"))
    (y,) = g.add_layer("attention", inputs, {"scale": None, "is_causal": mask == "causal"}, name="attn")
    g.outputs = [y]
    assert CudaDnnModule().lowers(g.layers[0])
    source = generate_source(g, CudaFlavour(cc="90", nvcc=NVCC or "nvcc", dnn=True))
    gemms = [line.strip() for line in source.splitlines() if line.strip().startswith("if (sol_gemm(")]
    assert len(gemms) == 2 and gemms[0].endswith("// attn.scores (matmul)") and gemms[1].endswith("// attn (matmul)")
    assert ", 1, 0, 16, 16, 8, " in gemms[0]  # k read transposed where it lies: 16 x 16 scores of 8-wide rows
    softmax = source[source.index("attn.weights (softmax)"):]
    assert softmax.splitlines()[1].startswith("// warp: one warp per item")
    assert ("where" in source) == (mask is not None)


def test_module_accepts_only_what_it_plans():
    module = CudaDnnModule()
    _, conv = _conv_graph((1, 3, 8, 8), (4, 3, 3, 3))
    assert module.accepts(conv)
    g = Graph()
    x = g.add_input("x", _dims([2, 4]), dtype="float64")
    w = g.add_param("w", np.ones((3, 4)))
    g.add_layer("linear", [x, w])
    assert not module.accepts(g.layers[-1])  # float64: generated code
    call = DnnCall(0, conv)
    relu = Graph()
    r_in = relu.add_input("r", [Dim(s, Purpose.C) for s in conv.outputs[0].shape])
    relu.add_layer("relu", [r_in])
    assert module.fuses(call, r_in, relu.layers[-1])
    call.post_ops.append(relu.layers[-1])
    assert not module.fuses(call, r_in, relu.layers[-1])  # one activation per call
