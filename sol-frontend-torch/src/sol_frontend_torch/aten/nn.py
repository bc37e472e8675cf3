"""Layers: convolutions, linear/matmul, normalizations, pooling, softmax, attention, embedding."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sol.errors import SolUnsupportedError
from sol.ir import Tensor

from ._registry import Context, aten, axis, ints


def _conv_padding(padding: Any, weight: Tensor, dilation: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    spatial = weight.rank - 2
    if padding == "valid":
        return ((0, 0),) * spatial
    if padding == "same":  # PyTorch puts the odd extra element at the end
        totals = [d * (int(k) - 1) for d, k in zip(dilation, weight.shape[2:], strict=True)]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((p, p) for p in ints(padding, spatial))


def _conv(cx: Context, x: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any, dilation: Any, groups: int) -> Tensor:
    spatial = weight.rank - 2
    dil = ints(dilation, spatial)
    attrs = {"stride": ints(stride, spatial), "padding": _conv_padding(padding, weight, dil), "dilation": dil, "groups": int(groups)}
    return cx.one("conv", [x, weight] + ([bias] if bias is not None else []), attrs)


@aten("conv1d", "conv2d", "conv3d")
def conv(cx: Context, x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
         dilation: Any = 1, groups: int = 1) -> Tensor:
    return _conv(cx, x, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(cx: Context, x: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any,
                    output_padding: Any, groups: int, dilation: Any) -> Tensor:
    spatial = weight.rank - 2
    attrs = {"stride": ints(stride, spatial), "padding": ints(padding, spatial), "output_padding": ints(output_padding, spatial),
             "dilation": ints(dilation, spatial), "groups": int(groups)}
    return cx.one("conv_transpose", [x, weight] + ([bias] if bias is not None else []), attrs)


@aten("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def conv_transpose(cx: Context, x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                   output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    return _conv_transpose(cx, x, weight, bias, stride, padding, output_padding, groups, dilation)


@aten("convolution", "_convolution")
def convolution(cx: Context, x: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any, dilation: Any,
                transposed: bool, output_padding: Any, groups: int, *_: Any) -> Tensor:
    if transposed:
        return _conv_transpose(cx, x, weight, bias, stride, padding, output_padding, groups, dilation)
    return _conv(cx, x, weight, bias, stride, padding, dilation, groups)


@aten("linear")
def linear(cx: Context, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    return cx.one("linear", [x, weight] + ([bias] if bias is not None else []))


def _weight_like(a: Tensor, b: Tensor) -> bool:
    """``a @ b`` with ``b`` a 2-d parameter: a Linear written as a product (GPT-2's Conv1D, x @ W)."""
    return b.kind == "param" and b.rank == 2 and a.rank >= 2


def _as_linear(cx: Context, a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ W (+ bias) as the linear layer it is: W transposed once (a parameter-only layer, so it runs in prepare,
    again only when W changes), then the device's inner-product kernel with the bias fused."""
    weight = cx.one("permute", [b], {"perm": (1, 0)})
    return cx.one("linear", [a, weight] + ([bias] if bias is not None else []))


@aten("mm", "bmm", "matmul")
def matmul(cx: Context, a: Tensor, b: Tensor) -> Tensor:
    if _weight_like(a, b):
        return _as_linear(cx, a, b)
    return cx.one("matmul", [a, b])


def _scaled(cx: Context, t: Tensor, factor: float) -> Tensor:
    return t if factor == 1 else cx.one("mul", [t, cx.const(factor)])


@aten("addmm", "baddbmm")
def addmm(cx: Context, bias: Tensor, a: Tensor, b: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    if alpha == 1 and beta == 1 and _weight_like(a, b) and bias.rank == 1 and bias.kind in ("param", "const"):
        return _as_linear(cx, a, b, bias)
    product = _scaled(cx, matmul(cx, a, b), alpha)
    return cx.one("add", [product, _scaled(cx, bias, beta)]) if beta != 0 else product


def _batch_norm(cx: Context, x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor | None, var: Tensor | None,
                eps: float) -> Tensor:
    if mean is None or var is None:
        raise SolUnsupportedError("batch norm without running statistics (track_running_stats=False) normalizes with batch "
                                  "statistics, which SOL does not support in inference; enable track_running_stats")
    channels = int(x.shape[1])
    if weight is None and bias is not None:
        weight = cx.graph.add_const("bn_ones", np.ones(channels, dtype=x.dtype))
    inputs = [x, mean, var] + ([weight] if weight is not None else []) + ([bias] if bias is not None else [])
    return cx.one("batch_norm", inputs, {"eps": float(eps)})


def _running_update(cx: Context, running: Tensor, batch: Tensor, momentum: float | Tensor) -> None:
    """PyTorch's rule: running = (1 - momentum) * running + momentum * batch statistic."""
    if isinstance(momentum, Tensor):  # a factor computed in the graph: running + momentum * (batch - running)
        step = cx.one("mul", [cx.one("sub", [batch, running]), momentum])
        cx.mutate(running, cx.one("add", [running, step]))
        return
    kept = cx.one("mul", [running, cx.graph.add_const("bn_keep", np.array(1.0 - momentum, dtype=running.dtype))])
    new = cx.one("mul", [batch, cx.graph.add_const("bn_momentum", np.array(momentum, dtype=running.dtype))])
    cx.mutate(running, cx.one("add", [kept, new]))


def _batch_norm_train(cx: Context, x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor | None,
                      var: Tensor | None, momentum: float | None, eps: float) -> Tensor:
    if weight is None and bias is not None:
        weight = cx.graph.add_const("bn_ones", np.ones(int(x.shape[1]), dtype=x.dtype))
    inputs = [x] + ([weight] if weight is not None else []) + ([bias] if bias is not None else [])
    y, batch_mean, _, unbiased_var = cx.layer("batch_norm_train", inputs, {"eps": float(eps)})
    if mean is not None and var is not None:
        if momentum is None or momentum == CUMULATIVE_MOMENTUM:
            factor = _cumulative_factor(cx, mean)
            _running_update(cx, mean, batch_mean, factor)
            _running_update(cx, var, unbiased_var, factor)
        else:
            _running_update(cx, mean, batch_mean, float(momentum))
            _running_update(cx, var, unbiased_var, float(momentum))
    return y


#: the momentum the training capture gives BatchNorms with momentum=None (a cumulative average), whose factor
#: 1 / num_batches_tracked torch.export cannot trace; see `sol_frontend_torch.training.capture_variant`
CUMULATIVE_MOMENTUM = -1234.5


def _cumulative_factor(cx: Context, mean: Tensor) -> Tensor:
    """1 / num_batches_tracked (after this step's increment): PyTorch's factor for momentum=None."""
    names = [n for n, t in cx.graph.params.items() if t is mean]
    prefix = names[0].rpartition(".")[0] if names else None
    name = f"{prefix}.num_batches_tracked" if prefix else "num_batches_tracked"
    count = cx.written(name) if names else None
    if count is None:
        raise SolUnsupportedError("batch norm with momentum=None (a cumulative average) needs its num_batches_tracked "
                                  "buffer in training; set a momentum")
    counted = cx.one("cast", [count], {"dtype": mean.dtype})
    return cx.one("div", [cx.graph.add_const("bn_one", np.array(1.0, dtype=mean.dtype)), counted])


@aten("batch_norm")
def batch_norm(cx: Context, x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor | None, var: Tensor | None,
               training: bool, momentum: float, eps: float, *_: Any) -> Tensor:
    if training or mean is None or var is None:
        if training and not cx.training and mean is not None and var is not None:
            raise SolUnsupportedError("batch norm in training mode while capturing for inference; call model.eval()")
        # without running statistics the batch's own normalize (track_running_stats=False, or timm's weight
        # standardisation, F.batch_norm over a weight): the same in inference and training, nothing to update
        return _batch_norm_train(cx, x, weight, bias, mean, var, momentum, eps)
    return _batch_norm(cx, x, weight, bias, mean, var, eps)


@aten("_native_batch_norm_legit_no_training")
def batch_norm_no_training(cx: Context, x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, var: Tensor,
                           momentum: float, eps: float) -> tuple[Tensor, ...]:
    out = _batch_norm(cx, x, weight, bias, mean, var, eps)
    return (out,)  # the saved statistics (items 1, 2) are for training only


@aten("layer_norm")
def layer_norm(cx: Context, x: Tensor, normalized_shape: list[int], weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5, *_: Any) -> Tensor:
    if weight is None and bias is not None:
        weight = cx.graph.add_const("ln_ones", np.ones([int(s) for s in normalized_shape], dtype=x.dtype))
    inputs = [x] + ([weight] if weight is not None else []) + ([bias] if bias is not None else [])
    return cx.one("layer_norm", inputs, {"normalized_ndim": len(normalized_shape), "eps": float(eps)})


@aten("group_norm")
def group_norm(cx: Context, x: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5, *_: Any) -> Tensor:
    if weight is None and bias is not None:
        weight = cx.graph.add_const("gn_ones", np.ones(int(x.shape[1]), dtype=x.dtype))
    inputs = [x] + ([weight] if weight is not None else []) + ([bias] if bias is not None else [])
    return cx.one("group_norm", inputs, {"num_groups": int(num_groups), "eps": float(eps)})


def _max_pool(cx: Context, spatial: int, x: Tensor, kernel: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
              ceil_mode: bool = False) -> Tensor:
    k = ints(kernel, spatial)
    attrs = {"kernel": k, "stride": ints(stride, spatial) if stride else k, "padding": ints(padding, spatial),
             "dilation": ints(dilation, spatial), "ceil_mode": bool(ceil_mode)}
    return cx.one("max_pool", [x], attrs)


def _register_pools(spatial: int) -> None:
    @aten(f"max_pool{spatial}d")
    def max_pool(cx: Context, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return _max_pool(cx, spatial, x, *args, **kwargs)

    @aten(f"max_pool{spatial}d_with_indices")
    def max_pool_with_indices(cx: Context, x: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor]:
        return (_max_pool(cx, spatial, x, *args, **kwargs),)  # the indices are only for max_unpool / training

    @aten(f"avg_pool{spatial}d")
    def avg_pool(cx: Context, x: Tensor, kernel: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
        k = ints(kernel, spatial)
        attrs = {"kernel": k, "stride": ints(stride, spatial) if stride else k, "padding": ints(padding, spatial),
                 "ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad), "divisor_override": divisor_override}
        return cx.one("avg_pool", [x], attrs)

    @aten(f"adaptive_avg_pool{spatial}d", f"_adaptive_avg_pool{spatial}d")
    def adaptive_avg_pool(cx: Context, x: Tensor, output_size: Any) -> Tensor:
        return cx.one("adaptive_avg_pool", [x], {"output_size": _output_size(output_size, spatial)})

    @aten(f"adaptive_max_pool{spatial}d")
    def adaptive_max_pool(cx: Context, x: Tensor, output_size: Any) -> tuple[Tensor]:
        return (cx.one("adaptive_max_pool", [x], {"output_size": _output_size(output_size, spatial)}),)


def _output_size(value: Any, spatial: int) -> tuple[int | None, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(None if v is None else int(v) for v in value) if len(value) == spatial else (int(value[0]),) * spatial
    return (int(value),) * spatial


for _spatial_rank in (1, 2, 3):
    _register_pools(_spatial_rank)


@aten("softmax", "_softmax", "_safe_softmax")
def softmax(cx: Context, x: Tensor, dim: int, *_: Any) -> Tensor:
    return cx.one("softmax", [x], {"axis": axis(dim, x.rank)})


@aten("log_softmax", "_log_softmax")
def log_softmax(cx: Context, x: Tensor, dim: int, *_: Any) -> Tensor:
    return cx.one("log_softmax", [x], {"axis": axis(dim, x.rank)})


def _attention_with_dropout(cx: Context, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, dropout_p: float,
                            is_causal: bool, scale: float | None) -> Tensor:
    """Training attention with dropout on the weights: the composition (the fused op has no dropout)."""
    factor = 1.0 / float(np.sqrt(int(q.shape[-1]))) if scale is None else float(scale)
    perm = (*range(k.rank - 2), k.rank - 1, k.rank - 2)
    scores = cx.one("mul", [cx.one("matmul", [q, cx.one("permute", [k], {"perm": perm})]), cx.const(factor)])
    if is_causal:
        length, source = int(scores.shape[-2]), int(scores.shape[-1])
        causal = np.where(np.tril(np.ones((length, source), dtype=bool)), 0.0, -np.inf).astype(scores.dtype)
        scores = cx.one("add", [scores, cx.graph.add_const("causal_mask", causal)])
    if attn_mask is not None:
        if attn_mask.dtype == "bool":
            scores = cx.one("where", [attn_mask, scores, cx.const(float("-inf"))])
        else:
            scores = cx.one("add", [scores, attn_mask])
    weights = cx.one("softmax", [scores], {"axis": scores.rank - 1})
    weights = cx.one("dropout_train", [weights, cx.rng_key()], {"p": float(dropout_p), "stream": cx.rng_stream()})
    return cx.one("matmul", [weights, v])


@aten("scaled_dot_product_attention")
def attention(cx: Context, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
              is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        raise SolUnsupportedError("grouped-query attention (enable_gqa with fewer key heads) is not supported yet")
    if cx.training and dropout_p > 0:
        return _attention_with_dropout(cx, q, k, v, attn_mask, dropout_p, is_causal, scale)
    inputs = [q, k, v] + ([attn_mask] if attn_mask is not None else [])
    return cx.one("attention", inputs, {"scale": None if scale is None else float(scale), "is_causal": bool(is_causal)})


def _filled(cx: Context, value: float) -> Tensor:
    """The node's shape and dtype holding ``value`` everywhere: one element broadcast, so a wildcard batch works."""
    shape = cx.meta_shape()
    dtype = torch.empty(0, dtype=cx.node.meta["val"].dtype).numpy().dtype
    element = cx.graph.add_const(cx.where, np.full((1,) * len(shape), value, dtype=dtype))
    return element if all(s == 1 for s in shape) else cx.one("expand", [element], {"shape": shape})


@aten("empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided")
def empty(cx: Context, *_: Any, **__: Any) -> Tensor:
    """Memory whose contents are undefined until its reader overwrites it (stochastic depth's ``bernoulli_``)."""
    return _filled(cx, 0.0)


@aten("bernoulli")
def bernoulli(cx: Context, x: Tensor, p: Any = None, *_: Any, **__: Any) -> Tensor:
    """``x.bernoulli_(p)`` with a float p: 1 with probability p, else 0 (the keep mask of torchvision's
    StochasticDepth). The draws are dropout's (SOL's Philox stream, seeded by sol.set_seed), applied to ones
    without dropout's 1 / (1 - p) scaling; x's own values do not matter."""
    # bernoulli_(p=0.5) and bernoulli(x, p) take a float (0.5 when left out); the other overloads a tensor of them
    if getattr(cx.node.target, "_overloadname", "") not in ("float", "p") or isinstance(p, Tensor):
        raise SolUnsupportedError("bernoulli with a probability per element is not supported; only x.bernoulli_(p) "
                                  "with a float p (as in stochastic depth) is")
    if not cx.training:
        raise SolUnsupportedError("bernoulli while capturing for inference draws a new value every call; call "
                                  "model.eval() so that the random layers are off, or train the model")
    attrs = {"p": 1.0 - (0.5 if p is None else float(p)), "stream": cx.rng_stream(), "per_channel": False, "unscaled": True}
    return cx.one("dropout_train", [_filled(cx, 1.0), cx.rng_key()], attrs)


@aten("embedding")
def embedding(cx: Context, weight: Tensor, indices: Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    attrs: dict[str, Any] = {}
    if padding_idx >= 0:  # aten's -1: none (nn.Embedding has made a negative padding_idx positive already)
        attrs["padding_idx"] = int(padding_idx)
    if scale_grad_by_freq:
        attrs["scale_grad_by_freq"] = True
    return cx.one("embedding", [indices, weight], attrs)


@aten("channel_shuffle", "native_channel_shuffle")
def channel_shuffle(cx: Context, x: Tensor, groups: int) -> Tensor:
    return cx.one("channel_shuffle", [x], {"groups": int(groups)})


@aten("dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout")
def dropout(cx: Context, x: Tensor, p: float, train: bool) -> Tensor:
    if train and p > 0:
        kind = cx.node.target.__name__.split(".")[0]  # type: ignore[union-attr]
        if not cx.training or "alpha" in kind:
            what = "alpha dropout" if "alpha" in kind else "dropout in training mode while capturing for inference"
            raise SolUnsupportedError(f"{what} is not supported; call model.eval() for inference")
        # Dropout2d/3d (feature_dropout) drops whole channels: one draw per (n, c)
        attrs = {"p": float(p), "stream": cx.rng_stream(), "per_channel": kind == "feature_dropout"}
        return cx.one("dropout_train", [x, cx.rng_key()], attrs)
    return cx.one("dropout", [x], {"p": float(p)})
