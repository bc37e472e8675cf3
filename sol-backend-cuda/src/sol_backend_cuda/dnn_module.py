"""The CUDA DNN module: Conv (forward, backward data, backward filter) through cuDNN, Linear through cuBLASLt with
its bias and ReLU as the matmul's epilogue, MatMul/BMM and the linear weight gradient through cuBLAS.

sol-core plans which layers the module runs (`accepts`) and which ReLU after a
call it absorbs (`fuses`); `render` writes host lines that call the glue
(`sol_backend_cuda.glue`) at the call's place in the host program, with
``sol_stream``, the library's slice of the workspace and the call's math word
(``sol_fp32_math``: TF32 or not, as the caller's framework says) in scope. The
arguments come from the host-side plans (`sol_backend_cuda.blas`,
`sol_backend_cuda.cudnn`), which the tests check against numpy without a GPU.
Tensors are plain row-major (NCHW for convolutions): the module asks for no
other layout, so DFP kernels and library calls share every buffer as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sol.codegen import cexpr
from sol.codegen.dnn import DnnCall, DnnCode, DnnModule
from sol.errors import SolUnsupportedError
from sol.ir import Layer, Tensor, is_static

from . import blas, cudnn
from .glue import LIBRARY_WORKSPACE_BYTES

if TYPE_CHECKING:
    from sol.codegen.kernels import KernelContext

#: the variable of the host programs holding the libraries' workspace (see module.py's template)
WORKSPACE = "sol_library_workspace"
#: the host programs' parameter holding the call's math word (`sol.precision.Fp32Math.word`; see module.py)
MATH = "sol_fp32_math"
_CONV_KIND = {cudnn.FORWARD: "SOL_CONV_FORWARD", cudnn.BACKWARD_DATA: "SOL_CONV_BACKWARD_DATA",
              cudnn.BACKWARD_FILTER: "SOL_CONV_BACKWARD_FILTER"}


def _float32(layer: Layer) -> bool:
    return all(t.dtype == "float32" for t in (*layer.inputs, *layer.outputs)) and len(layer.outputs) == 1


class CudaDnnModule(DnnModule):
    name = "cudnn-cublas"

    def __init__(self, versions: str = "", autotune: bool = False) -> None:
        self.versions = versions
        #: convolution algorithms timed on the GPU (cudnnFind*Ex) at the first call of a batch size, instead of
        #: cuDNN's heuristics (``sol.config["autotuning"]``, `sol_backend_cuda.glue`)
        self.autotune = autotune

    def key(self) -> str:
        return (f"{self.name} {self.versions}|workspace {LIBRARY_WORKSPACE_BYTES}|fp32 math per call|attention as gemms"
                f"|autotune {int(self.autotune)}")

    # -- planning -------------------------------------------------------------------------------------------
    def accepts(self, layer: Layer) -> bool:
        if not _float32(layer):
            return False
        if layer.op in ("conv", "conv_grad_weight") or (layer.op == "conv_transpose" and
                                                        layer.attrs.get("conv_input_grad")):
            return cudnn.plan_conv(layer) is not None
        if layer.op == "linear":
            return layer.inputs[1].rank == 2 and layer.inputs[0].rank >= 1
        if layer.op == "linear_grad_weight":
            return layer.inputs[0].rank >= 1 and layer.outputs[0].rank == 2
        if layer.op == "matmul":
            return blas.plan_matmul(layer) is not None
        return False

    def lowers(self, layer: Layer) -> bool:
        # Attention as two cuBLAS strided-batch GEMMs around a softmax kernel (one warp per row): the fused
        # attention loop of the CPU flavours keeps a whole K^T per work item, which on a GPU is one thread per
        # (batch, head) with 32 KB of local memory (ViT-B/16 ran 71x slower than eager on an H100 that way).
        if layer.op != "attention" or len(layer.outputs) != 1:
            return False
        q, k, v = layer.inputs[:3]
        masks = layer.inputs[3:]
        if any(t.dtype != "float32" for t in (q, k, v, layer.outputs[0])) or any(
                m.dtype not in ("float32", "bool") for m in masks):
            return False
        causal_ok = not layer.attrs.get("is_causal", False) or (is_static(q.shape[-2]) and is_static(k.shape[-2]))
        return causal_ok and all(
            blas.plan_matmul(probe) is not None for probe in _attention_products(layer))

    def fuses(self, call: DnnCall, value: Tensor, layer: Layer) -> bool:
        # One ReLU after a forward conv (cudnnActivationForward in place) or a Linear (cuBLASLt's RELU epilogue).
        if call.post_ops or layer.op != "relu" or not _float32(layer) or layer.outputs[0].shape != value.shape:
            return False
        return call.anchor.op == "linear" or call.anchor.op == "conv"

    # -- code -----------------------------------------------------------------------------------------------
    def render(self, call: DnnCall, forward: KernelContext, prepare: KernelContext) -> DnnCode:
        anchor, sym = call.anchor, call.symbol
        for t in (*anchor.inputs, call.output):
            if tuple(forward.layout(t)) != tuple(range(t.rank)):
                raise SolUnsupportedError(f"layer {anchor.name!r}: the CUDA library call needs {t.name!r} in plain "
                                          f"row-major order, the plan has {forward.layout(t)}; please report this")
        relu = bool(call.post_ops)
        title = f"{anchor.name} ({anchor.op}{' + relu' if relu else ''})"
        name = f'"{anchor.name}"'
        code = DnnCode()
        code.init.append(f"if (sol_dnn_init() != 0) return 1;  // {title}")
        if anchor.op == "linear":
            plan = blas.plan_linear(anchor, "relu" if relu else None)
            bias = _ptr(forward, anchor.inputs[2]) if plan.bias else "nullptr"
            epilogue = {(False, False): "CUBLASLT_EPILOGUE_DEFAULT", (False, True): "CUBLASLT_EPILOGUE_RELU",
                        (True, False): "CUBLASLT_EPILOGUE_BIAS", (True, True): "CUBLASLT_EPILOGUE_RELU_BIAS"}[
                (plan.bias is not None, relu)]
            code.globals.append(f"static sol_lt_linear {sym} = {{}};  // {title}")
            operands = {"w": anchor.inputs[1], "x": call.source}
            code.forward.append(
                f"if (sol_lt_run({name}, &{sym}, sol_stream, {WORKSPACE}, {MATH}, {int(plan.trans_a)}, {int(plan.trans_b)}, "
                f"{_c(plan.m)}, {_c(plan.n)}, {_c(plan.k)}, {_c(plan.lda)}, {_c(plan.ldb)}, {_c(plan.ldc)}, {epilogue}, "
                f"(const float*){_ptr(forward, operands[plan.a])}, (const float*){_ptr(forward, operands[plan.b])}, "
                f"(const float*){bias}, (float*){_ptr(forward, call.output)}) != 0) return SOL_STATUS_LIBRARY;  "
                f"// {title}")
            return code
        if anchor.op in ("matmul", "linear_grad_weight"):
            plan = blas.plan_matmul(anchor) if anchor.op == "matmul" else blas.plan_linear_grad_weight(anchor)
            assert plan is not None  # accepts() planned it
            operands = ({"a": anchor.inputs[0], "b": anchor.inputs[1]} if anchor.op == "matmul"
                        else {"x": anchor.inputs[0], "dy": anchor.inputs[1]})
            code.forward.append(
                f"if (sol_gemm({name}, sol_stream, {WORKSPACE}, {MATH}, {int(plan.trans_a)}, {int(plan.trans_b)}, "
                f"{_c(plan.m)}, {_c(plan.n)}, {_c(plan.k)}, (const float*){_ptr(forward, operands[plan.a])}, "
                f"{_c(plan.lda)}, {_c(plan.stride_a)}, (const float*){_ptr(forward, operands[plan.b])}, {_c(plan.ldb)}, "
                f"{_c(plan.stride_b)}, (float*){_ptr(forward, call.output)}, {_c(plan.ldc)}, {_c(plan.stride_c)}, "
                f"{_c(plan.batch)}) != 0) return SOL_STATUS_LIBRARY;  // {title}")
            return code
        conv = cudnn.plan_conv(anchor)
        assert conv is not None  # accepts() planned it
        if conv.kind == cudnn.FORWARD:
            first, second = anchor.inputs[0], anchor.inputs[1]
        elif conv.kind == cudnn.BACKWARD_DATA:
            first, second = anchor.inputs[0], anchor.inputs[1]  # dy, the filter
        else:
            first, second = anchor.inputs[0], anchor.inputs[1]  # x, dy
        bias = _ptr(forward, anchor.inputs[2]) if conv.bias else "nullptr"
        code.globals.append(f"static sol_cudnn_conv {sym} = {{}};  // {title}")
        code.forward.append(
            f"if (sol_conv_run({name}, &{sym}, {_CONV_KIND[conv.kind]}, sol_stream, {WORKSPACE}, {MATH}, {_c(conv.n)}, "
            f"{conv.c}, {conv.h}, {conv.w}, {conv.k}, {conv.r}, {conv.s}, {conv.pad[0]}, {conv.pad[1]}, "
            f"{conv.stride[0]}, {conv.stride[1]}, {conv.dilation[0]}, {conv.dilation[1]}, {conv.groups}, {conv.p}, "
            f"{conv.q}, {int(relu)}, (const float*){_ptr(forward, first)}, (const float*){_ptr(forward, second)}, "
            f"(const float*){bias}, (float*){_ptr(forward, call.output)}) != 0) return SOL_STATUS_LIBRARY;  // {title}")
        return code


def _ptr(kc: KernelContext, tensor: Tensor) -> str:
    """A tensor's device address in host code: a constant is a ``__device__`` array, whose host-side name is only a
    shadow of it (``cudaGetSymbolAddress`` gives the device address; kernels use the name directly)."""
    name = kc.ptr(tensor)
    return f"sol_device_address({name})" if tensor.kind == "const" else name


def _c(size: object) -> str:
    return cexpr.size(size)  # type: ignore[arg-type]


def _attention_products(layer: Layer) -> list[Layer]:
    """The two matmuls an attention lowers to (scores = q k^T, out = p v), as layers for `blas.plan_matmul`."""
    q, k, v = layer.inputs[:3]
    scores = Tensor(f"{layer.name}.scores", tuple(q.dims[:-1]) + (k.dims[-2],), q.dtype)
    return [Layer("matmul", [q, k], [scores], {"transpose_b": True}, name=scores.name),
            Layer("matmul", [scores, v], list(layer.outputs), {}, name=layer.name)]
