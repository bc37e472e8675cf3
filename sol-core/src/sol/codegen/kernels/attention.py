"""Scaled-dot-product attention: one query row at a time (scores row, softmax, weighted sum of v)."""

from __future__ import annotations

import math

from ...ir import Layer
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt, index_vars
from .base import KernelContext, ctype_of, kernel, optional_input


@kernel("attention")
def attention(layer: Layer, kc: KernelContext) -> list[Node]:
    q, k, v = layer.inputs[:3]
    mask = optional_input(layer, 3)
    out = layer.outputs[0]
    t = ctype_of(out, layer)
    length, source = q.shape[-2], cexpr.static(k.shape[-2], f"key length of {layer.name!r}")
    e = cexpr.static(q.shape[-1], f"head size of {layer.name!r}")
    ev = cexpr.static(v.shape[-1], f"value size of {layer.name!r}")
    scale = layer.attrs.get("scale")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    batch = out.shape[:-2]
    bvars = index_vars("b", len(batch))

    def base(tensor_shape: tuple, row: str) -> str:  # type: ignore[type-arg]
        lead = cexpr.broadcast_index(bvars, batch, tensor_shape[:-2])
        return cexpr.linear([*lead, row, "0"], tensor_shape)

    # Scores and sums in the model's float type (as torch's CPU kernel does): doubles halve the SIMD width
    # and add conversions to every element; the max-subtracted softmax keeps float accurate.
    w = "double" if t == "double" else "float"
    score = f"sc[s] = ({w})acc * ({w}){scale!r};"
    masking: list[Node] = []
    if layer.attrs.get("is_causal", False):
        masking.append(Stmt("if (s > l) sc[s] = -INFINITY;"))
    if mask is not None:
        mshape = mask.shape
        m_index = cexpr.broadcast_index([*bvars, "l", "s"], (*batch, length, source), mshape)
        mval = kc.load(mask, m_index)
        masking.append(Stmt(f"if (!{mval}) sc[s] = -INFINITY;" if mask.dtype == "bool" else f"sc[s] += {mval};"))
    row: list[Node] = [
        Stmt(f"alignas(64) {w} sc[{source}];"),
        Stmt(f"alignas(64) {w} acc_v[{ev}];"),
        Stmt(f"const int64_t qo = {base(q.shape, 'l')}, ko = {base(k.shape, '0')}, vo = {base(v.shape, '0')};"),
        Loop("s", str(source), [
            Stmt(f"{t} acc = 0;"),
            Loop("c", str(e), [Stmt(f"acc += {kc.ptr(q)}[qo + c] * {kc.ptr(k)}[ko + s * {e} + c];")], vector=True,
                 reduction=("+", "acc")),
            Stmt(score),
            *masking,
        ]),
        Stmt(f"{w} mx = -INFINITY;"),
        Loop("s", str(source), [Stmt(f"mx = sol_max<{w}>(mx, sc[s]);")], vector=True, reduction=("max", "mx")),
        Stmt(f"{w} sum = 0;"),
        Loop("s", str(source), [Stmt(f"sc[s] = {kc.math('exp')}(sc[s] - mx);"), Stmt("sum += sc[s];")],
             vector=True, reduction=("+", "sum")),
        Stmt(f"const {w} inv = ({w})1 / sum;"),
        Loop("c", str(ev), [Stmt("acc_v[c] = 0;")], vector=True),
        Loop("s", str(source), [
            Stmt(f"const {w} p = sc[s] * inv;"),
            Loop("c", str(ev), [Stmt(f"acc_v[c] += p * {kc.ptr(v)}[vo + s * {ev} + c];")], vector=True),
        ]),
        Loop("c", str(ev), [Emit(f"({t})acc_v[c]", (*bvars, "l", "c"))], vector=True),
    ]
    inner: list[Node] = [Block(row)]
    for var, extent in reversed(list(zip([*bvars, "l"], [*batch, length], strict=True))):
        inner = [Loop(var, cexpr.size(extent), inner, parallel=True)]
    return inner
