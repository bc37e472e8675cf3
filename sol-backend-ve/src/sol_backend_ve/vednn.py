"""The vednn DNN module: Conv and Linear (forward and their gradients) as calls of NEC's vednn.

vednn (``sx-aurora-dev/vednn``) is the VE's convolution/linear library: NCHW
float tensors, filters ``[outChannel][inChannel/group][kh][kw]`` (PyTorch's
OIHW, so conv weights are read as they lie), symmetric padding, and linear
layers over ``[nBatch][inDim]`` rows with a ``[inDim][outDim]`` weight.

What runs there:

- ``conv`` (2-D, float32, groups, stride, dilation, symmetric padding):
  ``vednnConvolutionForward``, or ``...ForwardAddBias`` with a bias;
- a conv's input gradient (``conv_transpose`` marked ``conv_input_grad``):
  ``vednnConvolutionBackwardData`` with the forward conv's weights;
- ``conv_grad_weight``: ``vednnConvolutionBackwardFilter``;
- ``linear``: ``vednnLinearForward`` with the weight transposed to
  ``[in][out]`` once in prepare (into the derived parameters; prepare runs
  again whenever the parameters change, so training stays right); a bias is
  added by a loop after the call (vednn's linear has none);
- a linear's input gradient (``matmul`` marked ``linear_input_grad``):
  dy @ W is ``vednnLinearForward`` with inDim=out and outDim=in, reading
  PyTorch's ``[out][in]`` weight as it lies (vednnLinearBackwardData would
  want it transposed);
- ``linear_grad_weight``: dW = dy^T @ x is ``vednnLinearBackwardWeight`` with
  the roles of x and dy swapped, which writes PyTorch's ``[out][in]`` layout.

No post-ops (vednn fuses no activation): the elementwise layers after a call
stay DFP Clusters. MatMul stays DFP (vednn has no batched GEMM). The param
structs are filled at call time, since the batch N is a runtime value.

Generated code includes no header: the prelude declares the vednn types and
functions it calls (`DECLARATIONS`, read from native/vednn_declarations.h: copied from vednn.h, they are ABI).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sol
from sol.codegen import cexpr
from sol.codegen.dnn import DnnCall, DnnCode, DnnModule
from sol.ir import Layer, Size, Tensor
from sol.records import ConfigKey

if TYPE_CHECKING:  # the kernels package registers every op (slow to import)
    from sol.codegen.kernels import KernelContext

DNN_KEY = ConfigKey(
    "ve::dnn",
    bool,
    True,
    "Run Conv/Linear (and their gradients) through vednn when it is installed; False generates library-free code "
    "for every layer.",
)
VEDNN_KEY = ConfigKey(
    "ve::vednn",
    str,
    "",
    "Install prefix of NEC's vednn on a real VE (include/vednn.h, lib/libvednn_openmp.so); empty: search "
    "/opt/nec/ve and /opt/nec/ve/vednn. The emulated VE always has its own.",
)
#: where NEC's vednn is looked for when ``ve::vednn`` is empty
SEARCH_PREFIXES = (Path("/opt/nec/ve"), Path("/opt/nec/ve/vednn"), Path("/usr/local/ve/vednn"))
#: vednn's library names (its CMake: vednn_openmp with USE_OPENMP, else vednn_sequential), the preferred first
LIBRARY_NAMES = ("vednn_openmp", "vednn_sequential", "vednn")
#: vednn's OpenMP LinearBackwardWeight splits inDim over the threads and computes nothing when inDim is below the
#: thread count (src/C/vednnLinearBackwardWeight.c: ``if (nInDim == 0)``); a VE has at most 16 cores
MIN_GRAD_WEIGHT_ROWS = 16

#: the vednn ABI generated code calls, declared (no #include: LLVM's VE target has no VE libc headers)
DECLARATIONS = (Path(__file__).with_name("native") / "vednn_declarations.h").read_text()


# -- finding NEC's vednn (real VE) --------------------------------------------------------------------------------
@dataclass(frozen=True)
class VednnInstall:
    """An installed vednn: its header's directory and the library to link."""

    include_dir: Path
    library: Path

    @property
    def link_flags(self) -> list[str]:
        name = self.library.name
        stem = name[3:].split(".", 1)[0] if name.startswith("lib") else name
        lib_dir = self.library.parent
        return [f"-L{lib_dir}", f"-l{stem}", f"-Wl,-rpath,{lib_dir}"]


def configured_prefix() -> str:
    return str(sol.config.get(VEDNN_KEY.name, VEDNN_KEY.default))


def find_vednn(prefix: str | None = None, search: Sequence[Path] = SEARCH_PREFIXES) -> VednnInstall | None:
    """NEC's vednn under ``prefix`` (default ``ve::vednn``), else under the usual prefixes; None when absent."""
    configured = configured_prefix() if prefix is None else prefix
    prefixes = [Path(configured).expanduser()] if configured else list(search)
    for root in prefixes:
        headers = [d for d in (root / "include", root / "include" / "vednn") if (d / "vednn.h").is_file()]
        if not headers:
            continue
        for name in LIBRARY_NAMES:
            for lib_dir in (root / "lib", root / "lib64"):
                for suffix in (".so", ".a"):
                    library = lib_dir / f"lib{name}{suffix}"
                    if library.is_file() and os.access(library, os.R_OK):
                        return VednnInstall(headers[0], library)
    return None


# -- the module -------------------------------------------------------------------------------------------------
def _float32(tensors: Sequence[Tensor]) -> bool:
    return all(t.dtype == "float32" for t in tensors)


def _static(sizes: Sequence[Size]) -> bool:
    return all(isinstance(s, int) for s in sizes)


def _pairs(padding: object) -> list[tuple[int, int]]:
    from sol.codegen.kernels.base import spatial_padding  # lazy: the kernels load every op

    return spatial_padding(padding, 2)


def _conv_sizes_consistent(x: Tensor, y: Tensor, kernel: Sequence[int], attrs: dict) -> bool:
    """Whether ``y``'s spatial sizes are what the conv of ``x`` produces (vednn computes from both as given)."""
    for i, (begin, end) in enumerate(_pairs(attrs["padding"])):
        reach = int(attrs["dilation"][i]) * (int(kernel[i]) - 1) + 1
        if (int(x.shape[2 + i]) + begin + end - reach) // int(attrs["stride"][i]) + 1 != int(y.shape[2 + i]):
            return False
    return True


class VednnModule(DnnModule):
    """vednn's calls for Conv/Linear and their gradients (see the module docstring)."""

    name = "vednn"

    def __init__(self, version: str = "") -> None:
        self.version = version  # which vednn (emulated, or the library's path): part of the cache key

    def key(self) -> str:
        return f"vednn {self.version}|fwd conv,linear|bwd conv data/filter,linear data/weight" \
               f"|grad weight rows {MIN_GRAD_WEIGHT_ROWS}"

    # -- planning ---------------------------------------------------------
    def accepts(self, layer: Layer) -> bool:
        if not _float32([*layer.inputs, *layer.outputs]) or len(layer.outputs) != 1:
            return False
        a = layer.attrs
        if layer.op == "conv":
            x, w = layer.inputs[0], layer.inputs[1]
            return (x.rank == 4 and len(layer.inputs) in (2, 3) and _static(x.shape[1:]) and _static(w.shape)
                    and all(b == e for b, e in _pairs(a["padding"]))
                    and _conv_sizes_consistent(x, layer.outputs[0], w.shape[2:], a))
        if layer.op == "conv_grad_weight":  # x, dy -> dw
            x, dy = layer.inputs
            return (x.rank == 4 and _static(x.shape[1:]) and _static(dy.shape[1:])
                    and _static(layer.outputs[0].shape) and all(b == e for b, e in _pairs(a["padding"]))
                    and _conv_sizes_consistent(x, dy, a["kernel"], a))
        if layer.op == "conv_transpose" and a.get("conv_input_grad"):  # dy, w -> dx: the conv's backward-data
            dy, w = layer.inputs[0], layer.inputs[1]
            dx = layer.outputs[0]
            return (len(layer.inputs) == 2 and dy.rank == 4 and _static(dy.shape[1:]) and _static(w.shape)
                    and _static(dx.shape[1:]))
        if layer.op == "linear":
            x, w = layer.inputs[0], layer.inputs[1]
            return x.rank >= 2 and w.rank == 2 and _static(w.shape) and len(layer.inputs) in (2, 3)
        if layer.op == "matmul" and a.get("linear_input_grad"):  # dy, w -> dx
            dy, w = layer.inputs
            return dy.rank >= 2 and w.rank == 2 and _static(w.shape)
        if layer.op == "linear_grad_weight":  # x, dy -> dw [out, in]
            x, dy = layer.inputs
            return (x.rank >= 2 and dy.rank >= 2 and _static([x.shape[-1], dy.shape[-1]])
                    and int(dy.shape[-1]) >= MIN_GRAD_WEIGHT_ROWS)
        return False

    def static_inputs(self, layer: Layer) -> Sequence[int]:
        return (1,) if layer.op == "linear" else ()  # the linear's weight, transposed once in prepare

    def fuses(self, call: DnnCall, value: Tensor, layer: Layer) -> bool:
        return False  # vednn fuses no activation; the bias is the call's own (AddBias / the linear's bias loop)

    # -- code -------------------------------------------------------------
    def render(self, call: DnnCall, forward: KernelContext, prepare: KernelContext) -> DnnCode:
        anchor, sym = call.anchor, call.symbol
        for t in [*anchor.inputs, *anchor.outputs]:
            if forward.layout(t) != tuple(range(t.rank)):
                raise AssertionError(f"vednn call {sym} ({anchor.name}): tensor {t.name} is planned in layout "
                                     f"{forward.layout(t)}, vednn reads plain row-major tensors")
        code = DnnCode()
        title = f"{sym}: {anchor.name} ({anchor.op}) through vednn"
        fail = "{ sol_fail(&sol_status, SOL_STATUS_LIBRARY); return sol_status; }"
        if anchor.op in ("conv", "conv_grad_weight") or anchor.op == "conv_transpose":
            body = _conv_call(anchor, forward)
        elif anchor.op == "linear":
            x, w, y = anchor.inputs[0], anchor.inputs[1], anchor.outputs[0]
            out_dim, in_dim = int(w.shape[0]), int(w.shape[1])
            code.globals.append(f"static int64_t {sym}_packed = 0;  // {anchor.name}: its weight as [in][out]")
            code.init.append(f"{sym}_packed = sol_derived_reserve({in_dim * out_dim * 4});")
            code.prepare += [
                f"{{  // {anchor.name}: weight [{out_dim}][{in_dim}] -> [{in_dim}][{out_dim}] for vednnLinearForward",
                f"  const float* w = {prepare.ptr(w)};",
                f"  float* packed = (float*)(derived + {sym}_packed);",
                "#pragma omp parallel for",
                f"  for (int64_t i = 0; i < {in_dim}; ++i) {{",
                "#pragma _NEC ivdep",
                f"    for (int64_t o = 0; o < {out_dim}; ++o) packed[i * {out_dim} + o] = w[o * {in_dim} + i];",
                "  }",
                "}",
            ]
            rows = _rows(x)
            body = [f"if (vednnLinearForward({in_dim}UL, {out_dim}UL, (unsigned long)({rows}), {forward.ptr(x)}, "
                    f"derived + {sym}_packed, {forward.ptr(y)}) != VEDNN_SUCCESS) {fail}"]
            if len(anchor.inputs) > 2:  # vednn's linear has no bias: one pass over the result
                bias, out = forward.ptr(anchor.inputs[2]), forward.ptr(y)
                body += [
                    "#pragma omp parallel for",
                    f"for (int64_t r = 0; r < (int64_t)({rows}); ++r) {{",
                    "#pragma _NEC ivdep",
                    f"  for (int64_t o = 0; o < {out_dim}; ++o) {out}[r * {out_dim} + o] += {bias}[o];",
                    "}",
                ]
        elif anchor.op == "matmul":  # a linear's input gradient: dx = dy @ W, W [out][in] read as [inDim][outDim]
            dy, w, dx = anchor.inputs[0], anchor.inputs[1], anchor.outputs[0]
            out_dim, in_dim = int(w.shape[0]), int(w.shape[1])
            body = [f"if (vednnLinearForward({out_dim}UL, {in_dim}UL, (unsigned long)({_rows(dy)}), {forward.ptr(dy)}, "
                    f"{forward.ptr(w)}, {forward.ptr(dx)}) != VEDNN_SUCCESS) {fail}"]
        else:  # linear_grad_weight: dW [out][in] = dy^T x, vednn's dW^T of the swapped roles
            x, dy, dw = anchor.inputs[0], anchor.inputs[1], anchor.outputs[0]
            in_dim, out_dim = int(x.shape[-1]), int(dy.shape[-1])
            body = [f"if (vednnLinearBackwardWeight({out_dim}UL, {in_dim}UL, (unsigned long)({_rows(x)}), "
                    f"{forward.ptr(dy)}, {forward.ptr(x)}, {forward.ptr(dw)}) != VEDNN_SUCCESS) {fail}"]
        if anchor.op in ("conv", "conv_grad_weight", "conv_transpose"):
            body = [*body[:-1], f"if ({body[-1]} != VEDNN_SUCCESS) {fail}"]
        code.forward += [f"{{  // {title}", *(f"  {line}" if not line.startswith("#") else line for line in body),
                         "}"]
        return code


def _rows(t: Tensor) -> str:
    """The rows of a [..., features] tensor (every dim but the last), as C code of N."""
    return cexpr.mul(*(cexpr.size(s) for s in t.shape[:-1]))


def _tensor(t: Tensor) -> str:
    n, c, h, w = (cexpr.size(s) for s in t.shape)
    return f"sol_vednn_tensor({n}, {c}, {h}, {w})"


def _conv_call(anchor: Layer, kc: KernelContext) -> list[str]:
    """Statements that fill the param structs; the last one is the call's expression (checked by the caller)."""
    a = anchor.attrs
    groups = int(a.get("groups", 1))
    stride = [int(s) for s in a["stride"]]
    dilation = [int(d) for d in a["dilation"]]
    if anchor.op == "conv_transpose":  # dy, w -> dx; the forward conv's begin padding (the end one is implied)
        pads = [int(p) for p in a["padding"]]
    else:
        pads = [b for b, _ in _pairs(a["padding"])]
    conv = f"sol_vednn_conv({groups}, {stride[0]}, {stride[1]}, {pads[0]}, {pads[1]}, {dilation[0]}, {dilation[1]})"
    if anchor.op == "conv":
        x, w, y = anchor.inputs[0], anchor.inputs[1], anchor.outputs[0]
        o, i_per_group, kh, kw = (int(s) for s in w.shape)
        lines = [f"const vednnTensorParam_t in = {_tensor(x)}, out = {_tensor(y)};",
                 f"const vednnFilterParam_t filter = sol_vednn_filter({o // groups}, {i_per_group}, {kh}, {kw});",
                 f"const vednnConvolutionParam_t conv = {conv};"]
        if len(anchor.inputs) > 2:
            lines.append(f"vednnBiasParam_t bias; bias.dtype = DTYPE_FLOAT; bias.channel = {o};")
            lines.append(f"vednnConvolutionForwardAddBias(&in, {kc.ptr(x)}, &filter, {kc.ptr(w)}, &bias, "
                         f"{kc.ptr(anchor.inputs[2])}, &out, {kc.ptr(y)}, &conv, VEDNN_CONV_ALGORITHM_DIRECT)")
        else:
            lines.append(f"vednnConvolutionForward(&in, {kc.ptr(x)}, &filter, {kc.ptr(w)}, &out, {kc.ptr(y)}, "
                         "&conv, VEDNN_CONV_ALGORITHM_DIRECT)")
        return lines
    if anchor.op == "conv_grad_weight":
        x, dy, dw = anchor.inputs[0], anchor.inputs[1], anchor.outputs[0]
        o, i_per_group, kh, kw = (int(s) for s in dw.shape)
        return [f"const vednnTensorParam_t in = {_tensor(x)}, grad_out = {_tensor(dy)};",
                f"const vednnFilterParam_t filter = sol_vednn_filter({o // groups}, {i_per_group}, {kh}, {kw});",
                f"const vednnConvolutionParam_t conv = {conv};",
                f"vednnConvolutionBackwardFilter(&in, {kc.ptr(x)}, &grad_out, {kc.ptr(dy)}, &filter, {kc.ptr(dw)}, "
                "&conv, VEDNN_CONV_ALGORITHM_DIRECT)"]
    dy, w, dx = anchor.inputs[0], anchor.inputs[1], anchor.outputs[0]
    o, i_per_group, kh, kw = (int(s) for s in w.shape)  # the forward conv's weight [O][I/g][kh][kw]
    return [f"const vednnTensorParam_t grad_out = {_tensor(dy)}, grad_in = {_tensor(dx)};",
            f"const vednnFilterParam_t filter = sol_vednn_filter({o // groups}, {i_per_group}, {kh}, {kw});",
            f"const vednnConvolutionParam_t conv = {conv};",
            f"vednnConvolutionBackwardData(&grad_out, {kc.ptr(dy)}, &filter, {kc.ptr(w)}, &grad_in, {kc.ptr(dx)}, "
            "&conv, VEDNN_CONV_ALGORITHM_DIRECT)"]
