"""The oneDNN DNN module: Conv, ConvTranspose, Linear and MatMul as oneDNN primitives (and pools in bf16).

Generated code fills a `sol_dnnl_desc` per call (dims as C expressions of
the batch N) and calls the glue (``glue/sol_dnnl.h``): primitives are
created once in ``<prefix>_init``, static weights are reordered into the
format oneDNN picked (``format_tag::any``) once in prepare, and forward
executes. Activations of convolutions are channels-last, which oneDNN's
AVX2/AVX-512 kernels (brgconv, jit) run at near peak and which DFP code
reads and writes directly, so reorders happen only at the model's edges.
Elementwise layers after a call become oneDNN post-ops: eltwise
(activations) and binary (residual adds, per-channel scales).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import sol
from sol.codegen import cexpr, storage
from sol.codegen.dnn import DnnCall, DnnCode, DnnModule
from sol.codegen.layout import channels_last
from sol.codegen.views import View
from sol.ir import Layer, Size, Tensor

from . import attention, grouped, input_scale, linear, pooling, rnn, views, winograd
from .precision import BF16_STORAGE_KEY
from .tuning import DIRECT, Tuner

if TYPE_CHECKING:  # the kernels package registers every op (slow to import): only the generator needs it
    from sol.codegen.kernels import KernelContext

MAX_DIMS = 8
MAX_POST = 8

#: SOL op -> the glue's eltwise algorithm (see sol_dnnl.h); parameters in `_eltwise`
ELTWISE = {
    "relu": "SOL_DNNL_RELU", "leaky_relu": "SOL_DNNL_RELU", "clamp": "SOL_DNNL_CLIP", "elu": "SOL_DNNL_ELU",
    "gelu": "SOL_DNNL_GELU_ERF", "sigmoid": "SOL_DNNL_LOGISTIC", "tanh": "SOL_DNNL_TANH", "silu": "SOL_DNNL_SWISH",
    "hardswish": "SOL_DNNL_HARDSWISH", "hardsigmoid": "SOL_DNNL_HARDSIGMOID",
}
#: SOL op -> the glue's binary algorithm; the call's value must be operand 0 of the non-commutative ones
BINARY = {"add": "SOL_DNNL_ADD", "mul": "SOL_DNNL_MUL", "sub": "SOL_DNNL_SUB", "div": "SOL_DNNL_DIV",
          "maximum": "SOL_DNNL_MAX", "minimum": "SOL_DNNL_MIN"}
COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum"})
_FLT_MAX = "3.402823466e+38f"


def _float32(tensors: Sequence[Tensor]) -> bool:
    return all(t.dtype == "float32" for t in tensors)


class OneDnnModule(DnnModule):
    name = "onednn"

    def __init__(self, version: str = "", tuner: Tuner | None = None) -> None:
        self.version = version
        self.tuner = tuner  # times SOL's kernels against oneDNN per convolution (None: the heuristics decide)
        #: "fp32" or "bf16" (sol.precision; set by X86Flavour.use_precision): the operand type of forward calls
        self.precision = "fp32"
        #: id(DnnCall) -> (the call, whether the grouped kernel runs it): the storage planner and the render both ask
        self._grouped_choice: dict[int, tuple[DnnCall, bool]] = {}
        #: the results of the pools of the graph being planned that oneDNN runs (`sees`), by id: the layout planning
        #: rebuilds a layer whose input it reorders, but keeps its outputs (held here, so their ids stay unique)
        self._library_pools: dict[int, Tensor] = {}

    def key(self) -> str:
        # which kernel runs each call is part of the generated code, so what decides it is part of the cache key
        key = (f"onednn {self.version}|{winograd.settings()}|{grouped.settings()}|{linear.settings(self.tuner)}"
               f"|{input_scale.settings()}|{rnn.settings()}"
               f"|attention {attention.MIN_MULTIPLY_ADDS} scores scaled|{views.settings()}"
               f"|autotuning {int(sol.config['autotuning'])}|gemv dfp")
        if self.precision == "fp32":
            return key
        return f"{key}|{self.precision} stored {storage.VERSION if self.store_reduced else 0}|{pooling.settings()}"

    @property
    def store_reduced(self) -> bool:
        """Whether activations between bf16 calls are stored in bf16 (`sol.codegen.storage`; x86::bf16_storage)."""
        return self.reduced and bool(sol.config.get(BF16_STORAGE_KEY.name, BF16_STORAGE_KEY.default))

    @property
    def reduced(self) -> bool:
        """Whether forward calls compute in bf16 (SOL's own fp32 kernels and folded input scales then do not apply:
        their packed weights are fp32)."""
        return self.precision != "fp32"

    # -- planning ---------------------------------------------------------
    def accepts(self, layer: Layer) -> bool:
        if layer.op == "rnn":  # several outputs: one oneDNN RNN primitive (see rnn.py)
            return not self.reduced and rnn.accepts(layer)
        if not _float32([*layer.inputs, *layer.outputs]) or len(layer.outputs) != 1:
            return False
        if layer.op == "conv":
            return 3 <= layer.inputs[0].rank <= 5 and len(layer.inputs) >= 2 and not _single_pixel_gemv(layer)
        if layer.op == "conv_grad_weight":  # training: oneDNN's convolution backward-weights
            return 3 <= layer.inputs[0].rank <= 5 and _consistent_conv(layer)
        if layer.op == "conv_transpose" and layer.attrs.get("conv_input_grad"):
            return 3 <= layer.inputs[0].rank <= 5  # training: run as the conv's backward-data (any padding)
        if layer.op == "conv_transpose":
            r = layer.inputs[0].rank - 2
            opad = [int(p) for p in layer.attrs.get("output_padding", [0] * r)]
            pads = [int(p) for p in layer.attrs["padding"]]
            # oneDNN's right padding is padding - output_padding; it must not be negative
            return 1 <= r <= 3 and all(p >= o for p, o in zip(pads, opad, strict=True))
        if layer.op == "linear":
            return layer.inputs[0].rank >= 2
        if layer.op == "linear_grad_weight":  # training: oneDNN's inner-product backward-weights
            return layer.inputs[0].rank >= 2
        if layer.op in pooling.OPS:  # bf16 only, where a library call reads the result (pooling.py, `sees`)
            return self.reduced and id(layer.outputs[0]) in self._library_pools
        if layer.op == "matmul" and layer.attrs.get("linear_input_grad"):
            return layer.inputs[1].rank == 2  # training: run as the inner product's backward-data
        if layer.op == "matmul":
            a, b = layer.inputs
            return 2 <= a.rank <= MAX_DIMS and 2 <= b.rank <= MAX_DIMS
        return False

    def lowers(self, layer: Layer) -> bool:
        return attention.lowers(layer)

    def scales_scores(self, layer: Layer) -> bool:
        # the scale is a post-op of the q @ k^T call, so q reaches it unchanged, read where it lies (views.py)
        return True

    def reads_view(self, layer: Layer, index: int, view: View) -> bool:
        if layer.op != "matmul" or _backward(layer) or index not in (0, 1) or not views.enabled():
            return False
        transposed = index == 1 and bool(layer.attrs.get("transpose_b"))
        return views.reads(view, layer.outputs[0].rank, transposed)

    def writes_view(self, layer: Layer, view: View) -> bool:
        return (layer.op == "matmul" and not _backward(layer) and views.enabled()
                and views.writes(view, layer.outputs[0].rank))

    def static_inputs(self, layer: Layer) -> Sequence[int]:
        if layer.op == "rnn":
            return rnn.static_inputs(layer)
        if layer.op == "linear" and layer.attrs.get("trained_params"):
            # weights that change every step: packing them would be a reorder per step, and oneDNN's gemm
            # kernel on plain weights is as fast as brgemm on packed ones at training batch sizes (faster for
            # big layers at small batches: the MLP's 8192x8192 at batch 64 runs in 79 instead of 201 ms)
            return ()
        return (1,) if layer.op in ("conv", "conv_transpose", "linear") else ()

    # -- bf16 storage (sol.codegen.storage) -------------------------------
    def reduced_storage(self) -> str | None:
        return "bfloat16" if self.store_reduced else None

    def _in_bf16(self, call: DnnCall) -> bool:
        """Whether oneDNN runs ``call`` as a bf16 forward primitive (not SOL's own fp32 kernels, not training)."""
        anchor = call.anchor
        if not self.reduced or anchor.op not in _OP or _backward(anchor):
            return False
        return not (anchor.op == "conv" and self._grouped(call) and not grouped.depthwise(anchor))

    def _grouped(self, call: DnnCall) -> bool:
        """Whether the conv runs as SOL's fp32 grouped kernel (decided once per call: the choice may be timed)."""
        if id(call) not in self._grouped_choice:  # the call is kept with its answer, so its id is not reused
            self._grouped_choice[id(call)] = (call, grouped.choose(call.anchor, call.post_ops, self.tuner,
                                                                   self.precision))
        return self._grouped_choice[id(call)][1]

    def writes_reduced(self, call: DnnCall) -> bool:
        # oneDNN writes bf16 dst after its fp32 accumulation and post-ops (one rounding, as a Cluster's store)
        return self._in_bf16(call)

    def reads_reduced(self, call: DnnCall, layer: Layer, index: int) -> bool:
        if not self._in_bf16(call):
            return False
        if layer is call.input_scale:  # its x is read as src; the factors stay fp32 (the glue's src_scale)
            return layer.inputs[index] is call.source
        if layer is call.anchor:  # src, and MatMul's second operand when it is an activation (attention)
            return index == 0 or (layer.op == "matmul" and index == 1)
        return layer.op in BINARY  # a residual add's operand: oneDNN's binary post-ops read bf16 src1

    def absorbs_input_scale(self, mul: Layer, layer: Layer) -> bool:
        # the fold multiplies the packed fp32 weights per call (bf16: the fp32 weights, then packs them as bf16)
        return input_scale.foldable(mul, layer)

    def input_layout(self, layer: Layer, index: int) -> tuple[int, ...] | None:
        if layer.op in ("conv", "conv_transpose") and index == 0:
            return channels_last(layer.inputs[0].rank)
        if layer.op == "conv_grad_weight" and index in (0, 1):  # x and dy
            return channels_last(layer.inputs[index].rank)
        if layer.op in pooling.OPS and index == 0 and self.accepts(layer):
            return pooling.layout(layer)
        return None

    def output_layout(self, layer: Layer) -> tuple[int, ...] | None:
        if layer.op in ("conv", "conv_transpose"):
            return channels_last(layer.outputs[0].rank)
        if layer.op in pooling.OPS and self.accepts(layer):
            return pooling.layout(layer)
        return None

    def sees(self, layers: Sequence[Layer]) -> None:
        self._library_pools = pooling.library_pools(layers, self.accepts, ELTWISE) if self.reduced else {}

    def fuses(self, call: DnnCall, value: Tensor, layer: Layer) -> bool:
        if _backward(call.anchor) or call.anchor.op == "rnn":
            return False  # the backward primitives take no post-ops
        if len(call.post_ops) >= MAX_POST or not _float32([*layer.inputs, *layer.outputs]):
            return False
        if layer.outputs[0].shape != value.shape:
            return False
        if layer.op in ELTWISE:
            return len(layer.inputs) == 1
        if layer.op in BINARY and len(layer.inputs) == 2:
            position = 0 if layer.inputs[0] is value else 1
            other = layer.inputs[1 - position]
            if other is value or (position == 1 and layer.op not in COMMUTATIVE):
                return False
            kind = _broadcast_kind(call.anchor, other, value)
            if kind == "full" and other.rank == value.rank and call.layout(other) != call.layout(layer.outputs[0]):
                # a full operand in another layout than the result leaves oneDNN only its reference kernel
                # (~500x slower: a residual add of the model's NCHW input onto a channels-last conv)
                return False
            return kind is not None
        return False

    # -- code -------------------------------------------------------------
    def render(self, call: DnnCall, forward: KernelContext, prepare: KernelContext) -> DnnCode:
        if call.anchor.op == "rnn":
            return rnn.render(call, forward, prepare)
        anchor, sym = call.anchor, call.symbol
        fill = [f"static void {sym}_fill(int64_t N, sol_dnnl_desc* d) {{  // {anchor.name}: {anchor.op}",
                "  (void)N;"]
        fill += [f"  {line}" for line in self._describe(call, forward)]
        fill.append("}")
        static = bool(self.static_inputs(anchor))
        x = call.source
        weights = anchor.inputs[1] if len(anchor.inputs) > 1 else None  # a pool has none
        bias = anchor.inputs[2] if len(anchor.inputs) > 2 and anchor.op != "matmul" else None
        code = DnnCode()
        code.globals += [f"static void* {sym} = nullptr;", f"static int64_t {sym}_packed = 0;", *fill]
        code.init += [
            f"{sym} = sol_dnnl_create({sym}_fill, 1);",
            f'if (!{sym}) {{ fprintf(stderr, "SOL: oneDNN rejected layer %s: %s\\n", "{anchor.name}", '
            f"sol_dnnl_last_error()); return 1; }}",
            f"{sym}_packed = sol_derived_reserve(sol_dnnl_packed_bytes({sym}));",
        ]
        if static:
            code.prepare.append(f"if (sol_dnnl_pack({sym}, {prepare.ptr(weights)}, derived + {sym}_packed) != 0) "
                                f"return SOL_STATUS_LIBRARY;  // {anchor.name}: weights into oneDNN's format")
        binaries = [forward.ptr(_other(layer, value)) for layer, value in _post_values(call) if layer.op in BINARY]
        if call.scale is not None:  # after the binary operands (sol_dnnl.h, src_scale)
            binaries.append(forward.ptr(call.scale))
        post = f"const void* post[] = {{{', '.join(binaries)}}};" if binaries else "const void* const* post = nullptr;"
        if weights is None:
            weights_arg = "nullptr"
        else:
            weights_arg = f"derived + {sym}_packed" if static else _operand_ptr(call, 1, forward)
        bias_arg = forward.ptr(bias) if bias is not None else "nullptr"
        x_arg = _operand_ptr(call, 0, forward) if call.input_scale is None else forward.ptr(x)
        code.forward += [
            f"{{ {post}  // {sym_title(call)}",
            f"  if (sol_dnnl_execute({sym}, N, {x_arg}, {weights_arg}, {bias_arg}, post, "
            f"{forward.ptr(call.output)}) != 0) return SOL_STATUS_LIBRARY; }}",
        ]
        return code

    def _describe(self, call: DnnCall, kc: KernelContext) -> list[str]:
        """Statements filling ``d`` for the batch ``N``."""
        anchor = call.anchor
        if anchor.op == "linear_grad_weight" or anchor.attrs.get("linear_input_grad"):
            return _describe_linear_backward(anchor, call.output)
        if _backward(anchor):
            return _describe_backward(anchor, call.output, kc)
        x, out = call.source, call.output
        has_bias = anchor.op != "matmul" and len(anchor.inputs) > 2
        lines = [f"d->op = {_OP[anchor.op]};", f"d->static_weights = {int(bool(self.static_inputs(anchor)))};",
                 f"d->has_bias = {int(has_bias)};"]
        if self.reduced:
            lines.append("d->precision = SOL_DNNL_BF16;  // bf16 operands, fp32 accumulation, dst and post-ops")
        if call.input_scale is not None:
            lines.append(f"d->src_scale = 1;  // {call.input_scale.name} (mul): folded into the weights per call")
        if anchor.op in pooling.OPS:
            lines += pooling.describe(anchor)
            lines += _tensor("d->src", x.shape, kc.layout(x))
            lines += _tensor("d->dst", out.shape, kc.layout(out))
        elif anchor.op in ("conv", "conv_transpose"):
            w = anchor.inputs[1]
            r = x.rank - 2
            groups = int(anchor.attrs.get("groups", 1))
            # an input scale is folded into oneDNN's packed weights, which Winograd's do not share (grouped
            # convolutions never take one: input_scale.foldable)
            # bf16: oneDNN's AMX/AVX512-BF16 direct kernels (Winograd's fp32 transforms would be slower and not bf16)
            winograd_ok = call.input_scale is None and not self.reduced
            algorithm = winograd.choose(anchor, call.post_ops, self.tuner) if winograd_ok else DIRECT
            if algorithm != DIRECT:
                lines.append(f"d->algorithm = {winograd.c_expression(algorithm)};  // SOL's "
                             f"{winograd.name(algorithm)}: see sol_winograd.h")
            elif self._grouped(call):
                lines.append("d->algorithm = SOL_DNNL_GROUPED;  // SOL's grouped/depthwise kernel: see "
                             + ("sol_depthwise.h" if self.reduced and grouped.depthwise(anchor) else "sol_grouped.h"))
            lines += _tensor("d->src", x.shape, kc.layout(x))
            lines += _tensor("d->dst", out.shape, kc.layout(out))
            lines += _tensor("d->weights", *_conv_weights(anchor.op, w.shape, groups))
            if has_bias:
                lines += _tensor("d->bias", (anchor.outputs[0].shape[1],), (0,))
            stride = [int(s) for s in anchor.attrs["stride"]]
            dilation = [int(d) - 1 for d in anchor.attrs["dilation"]]
            if anchor.op == "conv":
                from sol.codegen.kernels.base import spatial_padding  # lazy: the kernels load every op

                pads = spatial_padding(anchor.attrs["padding"], r)
                left, right = [b for b, _ in pads], [e for _, e in pads]
            else:
                left = [int(p) for p in anchor.attrs["padding"]]
                opad = [int(p) for p in anchor.attrs.get("output_padding", [0] * r)]
                right = [p - o for p, o in zip(left, opad, strict=True)]
            for name, values in (("stride", stride), ("dilation", dilation), ("pad_l", left), ("pad_r", right)):
                lines += [f"d->{name}[{i}] = {v};" for i, v in enumerate(values)]
        elif anchor.op == "linear":
            w = anchor.inputs[1]
            # an inner product over the flattened rows: oneDNN runs it with brgemm kernels, faster than its
            # matmul's gemm for packed weights
            rows = cexpr.mul(*(cexpr.size(s) for s in x.shape[:-1]))
            algorithm = linear.choose(anchor, call.post_ops, self.tuner, self.reduced)
            if algorithm != linear.DIRECT:
                lines.append(f"d->algorithm = {linear.GLUE_NAMES[algorithm]};  // instead of the inner product: "
                             "see linear.py")
            lines += _tensor("d->src", (rows, x.shape[-1]), (0, 1))
            lines += _tensor("d->weights", (w.shape[0], x.shape[-1]), (0, 1))
            lines += _tensor("d->dst", (rows, out.shape[-1]), (0, 1))
            if has_bias:
                lines += _tensor("d->bias", (w.shape[0],), (0,))
        else:
            rank = anchor.outputs[0].rank
            a, b = (_padded(t.shape, rank) for t in anchor.inputs)
            transposed = bool(anchor.attrs.get("transpose_b"))
            if transposed:  # b's last two dims swapped: described with swapped strides
                b = (*b[:-2], b[-1], b[-2])
            # operands read (the result written) through a view lie in its base's memory (views.py)
            a_order, b_order = (_operand_order(call, i, rank, transposed and i == 1) for i in (0, 1))
            out_order = tuple(range(rank))
            if call.result_view is not None:
                out_order = views.operand_order(call.result_view, rank) or out_order
            lines += _tensor("d->src", a, a_order)
            lines += _tensor("d->weights", b, b_order)
            lines += _tensor("d->dst", anchor.outputs[0].shape, out_order)
        count = 0
        for layer, value in _post_values(call):
            p = f"d->post[{count}]"
            if layer.op in ELTWISE:
                alpha, beta = _eltwise(layer)
                lines.append(f"{p}.kind = SOL_DNNL_ELTWISE; {p}.alg = {_eltwise_alg(layer)}; "
                             f"{p}.alpha = {alpha}; {p}.beta = {beta};")
            else:
                other = _other(layer, value)
                lines.append(f"{p}.kind = SOL_DNNL_BINARY; {p}.alg = {BINARY[layer.op]};")
                lines += _tensor(f"{p}.src1", *_binary_operand(anchor, other, value, kc))
            count += 1
        lines.append(f"d->npost = {count};")
        return lines + _stored_types(call, kc)


_OP = {"conv": "SOL_DNNL_CONV", "conv_transpose": "SOL_DNNL_DECONV", "linear": "SOL_DNNL_INNER_PRODUCT",
       "matmul": "SOL_DNNL_MATMUL", "max_pool": "SOL_DNNL_POOL", "avg_pool": "SOL_DNNL_POOL"}


def _single_pixel_gemv(layer: Layer) -> bool:
    """A 1x1 convolution of one 1x1 image (squeeze-excitation's FC layers): a matrix-vector product that SOL's
    generated dot products run in 1-7 us, where a oneDNN call costs 3-15 us (efficientnet_b0's 32 such
    layers: 0.22 ms in sol.profile)."""
    from sol.codegen.kernels.dense import single_pixel_conv  # lazy: the kernels load every op

    return layer.inputs[0].shape[0] == 1 and single_pixel_conv(layer)


def _backward(layer: Layer) -> bool:
    """Whether the layer runs as one of oneDNN's backward primitives (training)."""
    return layer.op in ("conv_grad_weight", "linear_grad_weight") or bool(
        layer.attrs.get("conv_input_grad") or (layer.op == "matmul" and layer.attrs.get("linear_input_grad")))


def _describe_linear_backward(anchor: Layer, out: Tensor) -> list[str]:
    """linear_grad_weight (x, dy -> dw) and a linear's input gradient (matmul dy, w -> dx) as inner-product terms.

    The rows of x and dy (every dim but the last) are flattened; the weights stay as the framework holds
    them ([O, I], plain): they change every step, so packing them would cost a reorder per step.
    """
    if anchor.op == "linear_grad_weight":
        x, dy = anchor.inputs
        op, w_shape = "SOL_DNNL_IP_BWD_WEIGHTS", out.shape
    else:
        dy, w = anchor.inputs
        x, op, w_shape = out, "SOL_DNNL_IP_BWD_DATA", w.shape
    rows = cexpr.mul(*(cexpr.size(s) for s in x.shape[:-1])) if x.rank > 1 else "1"
    lines = [f"d->op = {op};", "d->static_weights = 0;", "d->has_bias = 0;", "d->npost = 0;"]
    lines += _tensor("d->src", (rows, x.shape[-1]), (0, 1))
    lines += _tensor("d->weights", (w_shape[0], w_shape[1]), (0, 1))
    lines += _tensor("d->dst", (rows, dy.shape[-1]), (0, 1))
    return lines


def _consistent_conv(layer: Layer) -> bool:
    """Whether conv_grad_weight's dy has exactly the sizes the conv of its x produces (what oneDNN requires)."""
    from sol.codegen.kernels.base import spatial_padding  # lazy: the kernels load every op

    x, dy = layer.inputs
    sizes = [*x.shape[2:], *dy.shape[2:], *layer.outputs[0].shape]
    if not all(isinstance(s, int) for s in sizes):
        return False
    r = x.rank - 2
    a = layer.attrs
    for i, (begin, end) in enumerate(spatial_padding(a["padding"], r)):
        reach = int(a["dilation"][i]) * (int(a["kernel"][i]) - 1) + 1
        if (int(x.shape[2 + i]) + begin + end - reach) // int(a["stride"][i]) + 1 != int(dy.shape[2 + i]):
            return False
    return True


def _describe_backward(anchor: Layer, out: Tensor, kc: KernelContext) -> list[str]:
    """conv_grad_weight (x, dy -> dw) and a conv's input gradient (conv_transpose dy, w -> dx) in the conv's terms."""
    from sol.codegen.kernels.base import spatial_padding  # lazy: the kernels load every op

    a, b = anchor.inputs[0], anchor.inputs[1]
    r = a.rank - 2
    groups = int(anchor.attrs.get("groups", 1))
    stride = [int(s) for s in anchor.attrs["stride"]]
    dilation = [int(d) for d in anchor.attrs["dilation"]]
    if anchor.op == "conv_grad_weight":
        x, dy, w_shape, op, static = a, b, out.shape, "SOL_DNNL_CONV_BWD_WEIGHTS", 0
        pads = spatial_padding(anchor.attrs["padding"], r)
        left, right = [p for p, _ in pads], [p for _, p in pads]
        lines = _tensor("d->src", x.shape, kc.layout(x)) + _tensor("d->dst", dy.shape, kc.layout(dy))
    else:  # conv_transpose(dy, w) = the input gradient of conv(., w): dx is the conv's src
        dy, dx, w_shape, op, static = a, out, b.shape, "SOL_DNNL_CONV_BWD_DATA", 1
        left = [int(p) for p in anchor.attrs["padding"]]
        lines = _tensor("d->src", dx.shape, kc.layout(dx)) + _tensor("d->dst", dy.shape, kc.layout(dy))
        right = []
        for i in range(r):  # the smallest end padding for which the conv maps dx's size onto dy's
            covered = (int(dy.shape[2 + i]) - 1) * stride[i] + dilation[i] * (int(w_shape[2 + i]) - 1) + 1
            right.append(max(0, covered - int(dx.shape[2 + i]) - left[i]))
    lines = [f"d->op = {op};", f"d->static_weights = {static};", "d->has_bias = 0;", *lines]
    lines += _tensor("d->weights", *_conv_weights("conv", w_shape, groups))
    values = (("stride", stride), ("dilation", [d - 1 for d in dilation]), ("pad_l", left), ("pad_r", right))
    for name, items in values:
        lines += [f"d->{name}[{i}] = {v};" for i, v in enumerate(items)]
    lines.append("d->npost = 0;")
    return lines


def _stored_types(call: DnnCall, kc: KernelContext) -> list[str]:
    """The element types of the call's activations that are stored as bf16 (sol_dnnl_tensor.type)."""
    anchor = call.anchor
    operands = [("d->src", call.source), ("d->dst", call.output)]
    if anchor.op == "matmul":
        operands.append(("d->weights", call.operand(1)))
    for count, (layer, value) in enumerate(_post_values(call)):  # d->post[count], as _describe numbers them
        if layer.op in BINARY:
            operands.append((f"d->post[{count}].src1", _other(layer, value)))
    return [f"{target}.type = SOL_DNNL_BF16;  // {t.name} is stored as bf16" for target, t in operands
            if kc.stored(t) == "bfloat16"]


def _operand_order(call: DnnCall, index: int, rank: int, transposed: bool) -> tuple[int, ...]:
    """The memory order of a matmul operand as oneDNN is given it (rank dims, transposed: its last two swapped)."""
    view = call.views.get(index)
    order = views.operand_order(view, rank, transposed) if view is not None else None
    if order is not None:
        return order
    plain = tuple(range(rank))
    return views.swapped_order(plain) if transposed else plain


def _operand_ptr(call: DnnCall, index: int, kc: KernelContext) -> str:
    """The pointer the call reads the anchor's input ``index`` at: the tensor's, or where its view starts."""
    view = call.views.get(index)
    if view is None:
        return kc.ptr(call.anchor.inputs[index])
    return f"({kc.ptr(view.base)} + {view.offset})" if view.offset else kc.ptr(view.base)


def sym_title(call: DnnCall) -> str:
    before = [call.input_scale] if call.input_scale is not None else []
    return " -> ".join(f"{layer.name} ({layer.op})" for layer in [*before, call.anchor, *call.post_ops])


def _post_values(call: DnnCall) -> list[tuple[Layer, Tensor]]:
    """Each post-op with the value it reads (the call's result so far)."""
    value = call.anchor.outputs[0]
    out = []
    for layer in call.post_ops:
        out.append((layer, value))
        value = layer.outputs[0]
    return out


def _other(layer: Layer, value: Tensor) -> Tensor:
    return layer.inputs[1] if layer.inputs[0] is value else layer.inputs[0]


def _tensor(target: str, dims: Sequence[Size | str], order: Sequence[int]) -> list[str]:
    values = ", ".join(d if isinstance(d, str) else cexpr.size(d) for d in dims)
    return [f"{{ const int64_t dims[] = {{{values}}}; const int32_t order[] = {{{', '.join(map(str, order))}}}; "
            f"sol_dnnl_tensor_set(&{target}, {len(dims)}, dims, order); }}"]


def _padded(shape: Sequence[Size], rank: int) -> tuple[Size, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _conv_weights(op: str, shape: Sequence[Size], groups: int) -> tuple[tuple[Size, ...], tuple[int, ...]]:
    """oneDNN's logical weight dims ([G,] O, I, k...) and the memory order of PyTorch's tensor."""
    k = tuple(shape[2:])
    spatial = tuple(range(3 if groups > 1 else 2, (3 if groups > 1 else 2) + len(k)))
    if op == "conv":  # PyTorch [O, I/g, k...] is oneDNN's (g)oihw, plain
        if groups == 1:
            return (shape[0], shape[1], *k), (0, 1, *spatial)
        return (groups, int(shape[0]) // groups, shape[1], *k), (0, 1, 2, *spatial)
    # conv_transpose: PyTorch [I, O/g, k...] is oneDNN's (g)oihw with I outside O
    if groups == 1:
        return (shape[1], shape[0], *k), (1, 0, *spatial)
    return (groups, shape[1], int(shape[0]) // groups, *k), (0, 2, 1, *spatial)


def _broadcast_kind(anchor: Layer, other: Tensor, value: Tensor) -> str | None:
    """How a binary operand broadcasts to the call's result: full, channel, scalar (None: not as a post-op)."""
    if other.rank > value.rank:
        return None
    shape = _padded(other.shape, value.rank)
    if shape == value.shape:
        return "full"
    if all(s == 1 for s in shape):
        return "scalar"
    channel = 1 if anchor.op in ("conv", "conv_transpose", *pooling.OPS) else value.rank - 1
    if all(s == 1 or (i == channel and s == value.shape[i]) for i, s in enumerate(shape)):
        return "channel"
    return None


def _binary_operand(anchor: Layer, other: Tensor, value: Tensor,
                    kc: KernelContext) -> tuple[tuple[Size | str, ...], tuple[int, ...]]:
    """dims and memory order of a binary post-op's src1, in the call's dst shape (linear: flattened rows)."""
    kind = _broadcast_kind(anchor, other, value)
    rank = value.rank
    if anchor.op == "linear":
        rows = cexpr.mul(*(cexpr.size(s) for s in value.shape[:-1]))
        if kind == "full":
            return (rows, value.shape[-1]), (0, 1)
        return (1, value.shape[-1] if kind == "channel" else 1), (0, 1)
    shape = _padded(other.shape, rank)
    if kind == "full" and other.rank == rank:
        return shape, kc.layout(other)
    return shape, tuple(range(rank))  # broadcast operands (and rank-padded ones) are plain


def _eltwise_alg(layer: Layer) -> str:
    if layer.op == "gelu" and layer.attrs.get("approximate", "none") == "tanh":
        return "SOL_DNNL_GELU_TANH"
    return ELTWISE[layer.op]


def _eltwise(layer: Layer) -> tuple[str, str]:
    """(alpha, beta) of the oneDNN eltwise algorithm that computes ``layer``."""
    a = layer.attrs
    if layer.op == "leaky_relu":
        return f"{float(a.get('negative_slope', 0.01))!r}f", "0.0f"
    if layer.op == "clamp":
        lo, hi = a.get("min"), a.get("max")
        return (f"{float(lo)!r}f" if lo is not None and math.isfinite(lo) else f"-{_FLT_MAX}",
                f"{float(hi)!r}f" if hi is not None and math.isfinite(hi) else _FLT_MAX)
    if layer.op == "elu":
        return f"{float(a.get('alpha', 1.0))!r}f", "0.0f"
    if layer.op == "silu":
        return "1.0f", "0.0f"
    if layer.op in ("hardswish", "hardsigmoid"):
        return "(1.0f / 6.0f)", "0.5f"
    return "0.0f", "0.0f"
