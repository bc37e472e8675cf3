"""ONNX's Attention (opset 23+): scaled dot-product attention with masks, caches and grouped heads.

Composed from registry ops (matmul, softmax, where) because ONNX's variant
has more knobs than SOL's fused ``attention`` op: key/value caches, grouped
query heads, soft-capping, sliding windows and an optional scores output.
Masks that depend only on shapes (causal, sliding window, padding lengths)
become constants.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sol.ir import Tensor

from ._registry import handler
from ._util import reshape, scalar


def _heads(ctx: Any, x: Tensor, heads: int | None, what: str) -> Tensor:
    """[B, S, H*D] -> [B, H, S, D] (4-D inputs are already split)."""
    if x.rank == 4:
        return x
    if not heads:
        raise ctx.unsupported(f"3-D {what} needs the q_num_heads/kv_num_heads attributes")
    b, s, hidden = x.shape
    split = reshape(ctx, x, (b, s, heads, int(hidden) // heads))
    return ctx.one("permute", [split], {"perm": (0, 2, 1, 3)})


def _static_bias(ctx: Any, q_len: int, kv_len: int, offset: Any, dtype: str) -> np.ndarray | None:
    """The causal / sliding-window part of the bias (0 where attended, -inf elsewhere), or None."""
    causal = bool(ctx.attr("is_causal", 0))
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    if not causal and left < 0 and right < 0:
        return None
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    offsets = np.reshape(offset, (-1, 1, 1, 1)) if np.ndim(offset) else offset
    diff = (i + offsets) - j
    allowed = np.ones(np.shape(diff), dtype=bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return np.where(allowed, 0.0, -np.inf).astype(dtype)


@handler("Attention")
def attention(ctx: Any) -> list[Tensor | None]:
    q3, k3, v3 = ctx.need(0), ctx.need(1), ctx.need(2)
    mask, past_key, past_value, nonpad = ctx.input(3), ctx.input(4), ctx.input(5), ctx.input(6)
    q = _heads(ctx, q3, ctx.attr("q_num_heads"), "Q")
    k = _heads(ctx, k3, ctx.attr("kv_num_heads"), "K")
    v = _heads(ctx, v3, ctx.attr("kv_num_heads"), "V")
    if past_key is not None and past_value is not None:
        k = ctx.one("concat", [past_key, k], {"axis": 2})
        v = ctx.one("concat", [past_value, v], {"axis": 2})
    present_key, present_value = k, v
    batch, q_heads, q_len, head_size = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    if not all(isinstance(s, int) for s in (q_len, kv_len, q_heads, kv_heads)):
        raise ctx.unsupported("sequence lengths and head counts must not depend on the batch")
    scale = ctx.attr("scale")
    scale = 1.0 / math.sqrt(int(head_size)) if scale is None else float(scale)

    bias: Tensor | None = None
    if mask is not None:
        if int(mask.shape[-1]) < kv_len:  # a mask shorter than the keys leaves the rest unattended
            pads = tuple((0, 0) for _ in range(mask.rank - 1)) + ((0, kv_len - int(mask.shape[-1])),)
            fill: Any = False if mask.dtype == "bool" else -math.inf
            mask = ctx.one("pad", [mask], {"pads": pads, "mode": "constant", "value": fill})
        if mask.dtype == "bool":
            mask = ctx.one("where", [mask, scalar(ctx, 0.0, q), scalar(ctx, -math.inf, q)])
        bias = mask
    if nonpad is not None:
        lengths = np.asarray(ctx.static(nonpad, "nonpad_kv_seqlen")).reshape(-1)
        offset: Any = lengths - q_len
    else:
        offset = int(past_key.shape[2]) if past_key is not None else 0
    shape_bias = _static_bias(ctx, q_len, kv_len, offset, q.dtype)
    if nonpad is not None:
        padding = np.where(np.arange(kv_len) < lengths[:, None], 0.0, -np.inf).astype(q.dtype)
        padding = padding.reshape(len(lengths), 1, 1, kv_len)
        shape_bias = padding if shape_bias is None else shape_bias + padding
    if shape_bias is not None:
        const = ctx.const(shape_bias, name="bias")
        bias = const if bias is None else ctx.one("add", [bias, const])

    if kv_heads != q_heads:  # grouped-query attention: each key/value head serves q_heads / kv_heads queries
        repeat = ctx.const(np.arange(q_heads, dtype=np.int64) // (q_heads // kv_heads))
        k = ctx.one("gather", [k, repeat], {"axis": 1})
        v = ctx.one("gather", [v, repeat], {"axis": 1})
    scores = ctx.one("matmul", [q, ctx.one("permute", [k], {"perm": (0, 1, 3, 2)})])
    scores = ctx.one("mul", [scores, scalar(ctx, scale, scores)])
    softcap = float(ctx.attr("softcap", 0.0) or 0.0)
    if softcap > 0:
        capped = ctx.one("tanh", [ctx.one("div", [scores, scalar(ctx, softcap, scores)])])
        scores = ctx.one("mul", [capped, scalar(ctx, softcap, scores)])
    biased = scores if bias is None else ctx.one("add", [scores, bias])
    probs = ctx.one("softmax", [biased], {"axis": 3})
    if bias is not None:  # a row with every key masked gives zeros, not NaN
        row_max = ctx.one("reduce_max", [bias], {"axes": (bias.rank - 1,), "keepdims": True})
        dead = ctx.one("isinf", [row_max], {"detect_positive": False, "detect_negative": True})
        probs = ctx.one("where", [dead, scalar(ctx, 0.0, probs), probs])
    y = ctx.one("matmul", [probs, v])
    if q3.rank == 3:
        y = reshape(ctx, ctx.one("permute", [y], {"perm": (0, 2, 1, 3)}), (batch, q_len, q_heads * int(v.shape[3])))
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    qk = {2: biased, 3: probs}.get(mode, scores)
    return [y, present_key, present_value, qk]
