"""Scaled-dot-product attention: one query row at a time (scores row, softmax, weighted sum of v).

The scores of a row are a vector-matrix product with K. Computed as one dot
product per key, every score ends in a horizontal SIMD reduction; so when K
of one head fits in a small buffer, each parallel task takes a block of
query rows, copies its head's K transposed once (``kt[c][s]``) and
accumulates the scores row with FMAs along the keys (``sc[s] += q[c] *
kt[c][s]``), which vectorizes without reductions. Larger heads fall back to
the dot products.

Without a mask, the rows of a task go ``ROWS`` at a time, like a GEMM
micro-kernel: the scores loop is vectorized over the keys with the head
dimension inside, one accumulator per row in registers (per step: one load of
K^T, ``ROWS`` broadcasts of q, ``ROWS`` FMAs), and the weighted sum of v is
vectorized over the value dimension with the keys inside. The single-row
loop stored and reloaded its scores row at every FMA (ViT-B/16's attention:
3.2 ms per layer, 37 GFLOP/s on two AVX2 cores).

A mask (boolean or additive) and the causal limit are applied the same way,
branch-free on each row's scores (a blend or an add in the vectorized scores
loop): BERT's and GPT-2's attention always carries one (a [1, 1, L, S] bool
mask), and the single-row loop left it at 0.88 ms per layer (12 heads, 128 x
128 x 64, two AVX-512 cores) where four rows together take 0.52 ms.
"""

from __future__ import annotations

import math

from ...ir import Layer
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt, index_vars
from .base import KernelContext, ctype_of, kernel, optional_input

#: query rows per parallel task of the transposed-K kernel (amortizes the copy of K: ViT-B/16's 197 rows are
#: 2 tasks per head, 7 with 32 rows per task)
ROWS_PER_TASK = 128
#: the largest transposed K (elements) a task keeps on its stack
MAX_TRANSPOSED = 32768
#: query rows computed together (accumulators in registers) when there is no mask
ROWS = 4


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
    transposed = isinstance(source, int) and isinstance(e, int) and source * e <= MAX_TRANSPOSED
    if transposed:  # kt (filled per task below) holds this head's K as [c][s]
        scores: list[Node] = [
            Loop("s", str(source), [Stmt("sc[s] = 0;")], vector=True),
            Loop("c", str(e), [
                Stmt(f"const {w} qc = ({w}){kc.ptr(q)}[qo + c];"),
                Loop("s", str(source), [Stmt(f"sc[s] += qc * kt[c * {source} + s];")], vector=True),
            ]),
            Loop("s", str(source), [Stmt(f"sc[s] = sc[s] * ({w}){scale!r};"), *masking], vector=not masking),
        ]
    else:
        scores = [Loop("s", str(source), [
            Stmt(f"{t} acc = 0;"),
            Loop("c", str(e), [Stmt(f"acc += {kc.ptr(q)}[qo + c] * {kc.ptr(k)}[ko + s * {e} + c];")], vector=True,
                 reduction=("+", "acc")),
            Stmt(score),
            *masking,
        ])]
    row: list[Node] = [
        Stmt(f"alignas(64) {w} sc[{source}];"),
        Stmt(f"alignas(64) {w} acc_v[{ev}];"),
        Stmt(f"const int64_t qo = {base(q.shape, 'l')}, ko = {base(k.shape, '0')}, vo = {base(v.shape, '0')};"),
        *scores,
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
    if not transposed:
        inner: list[Node] = [Block(row)]
        for var, extent in reversed(list(zip([*bvars, "l"], [*batch, length], strict=True))):
            inner = [Loop(var, cexpr.size(extent), inner, parallel=True)]
        return inner
    # one task: a head (batch index) and a block of query rows, sharing one transposed copy of K
    rows, first = cexpr.size(length), f"lb * {ROWS_PER_TASK}"
    last = f"({first} + {ROWS_PER_TASK} < {rows} ? {first} + {ROWS_PER_TASK} : {rows})"

    def masked(value: str, row: str) -> str:  # a score of query row ``row`` at key ``s``, masked branch-free
        if mask is not None:
            m = kc.load(mask, cexpr.broadcast_index([*bvars, row, "s"], (*batch, length, source), mask.shape))
            value = f"({m} ? {value} : ({w})-INFINITY)" if mask.dtype == "bool" else f"({value} + ({w}){m})"
        return f"(s > {row} ? ({w})-INFINITY : {value})" if layer.attrs.get("is_causal", False) else value

    # ROWS rows at a time, then the rest one by one
    quads = f"({first} + ({last} - {first}) / {ROWS} * {ROWS})"
    walk: list[Node] = [
        Loop("l", quads, [Block(_rows_together(kc, q, v, t, w, source, e, ev, scale, base, bvars, masked))],
             start=first, step=str(ROWS)),
        Loop("l", last, [Block(row)], start=quads),
    ]
    task: list[Node] = [Block([
        Stmt(f"alignas(64) {w} kt[{source * e}];"),
        Stmt(f"const int64_t kto = {base(k.shape, '0')};"),
        Loop("s", str(source), [
            Loop("c", str(e), [Stmt(f"kt[c * {source} + s] = ({w}){kc.ptr(k)}[kto + s * {e} + c];")]),
        ]),
        *walk,
    ])]
    inner = [Loop("lb", f"(({rows}) + {ROWS_PER_TASK - 1}) / {ROWS_PER_TASK}", task, parallel=True)]
    for var, extent in reversed(list(zip(bvars, batch, strict=True))):
        inner = [Loop(var, cexpr.size(extent), inner, parallel=True)]
    return inner


def _rows_together(kc: KernelContext, q, v, t: str, w: str, source: int, e: int, ev: int, scale: float,  # type: ignore[no-untyped-def]
                   base, bvars: list[str], masked) -> list[Node]:
    """Query rows l .. l + ROWS - 1: scores (``masked(score, row)`` applies the mask and the causal limit), softmax
    and weighted sum with per-row register accumulators."""
    rows = range(ROWS)
    acc = ", ".join(f"a{r} = 0" for r in rows)
    exp = kc.math("exp")
    nodes: list[Node] = [
        Stmt(f"alignas(64) {w} sc[{ROWS}][{source}];"),
        Stmt(f"const int64_t qo = {base(q.shape, 'l')}, vo = {base(v.shape, '0')};"),
        *[Stmt(f"const int64_t l{r} = l + {r};") for r in rows],
        # outer-loop vectorization: lanes are keys, the head dimension runs inside on registers
        Loop("s", str(source), [
            Stmt(f"{w} {acc};"),
            Loop("c", str(e), [
                Stmt(f"const {w} kv = kt[c * {source} + s];"),
                *[Stmt(f"a{r} += ({w}){kc.ptr(q)}[qo + {r * e} + c] * kv;") for r in rows],
            ]),
            *[Stmt(f"sc[{r}][s] = a{r} * ({w}){scale!r};") for r in rows],
        ], vector=True),
        # the mask in loops of their own: a byte load and blend inside the loop above stop GCC's outer-loop
        # vectorization of it (BERT's masked attention then ran slower than one row at a time)
        *[Loop("s", str(source), [Stmt(f"sc[{r}][s] = {masked(f'sc[{r}][s]', f'l{r}')};")], vector=True)
          for r in rows if masked(f"sc[{r}][s]", f"l{r}") != f"sc[{r}][s]"],
        Stmt(f"{w} inv[{ROWS}];"),
    ]
    for r in rows:
        nodes += [
            Stmt(f"{w} mx{r} = -INFINITY;"),
            Loop("s", str(source), [Stmt(f"mx{r} = sol_max<{w}>(mx{r}, sc[{r}][s]);")], vector=True,
                 reduction=("max", f"mx{r}")),
            Stmt(f"{w} sum{r} = 0;"),
            Loop("s", str(source), [Stmt(f"sc[{r}][s] = {exp}(sc[{r}][s] - mx{r});"), Stmt(f"sum{r} += sc[{r}][s];")],
                 vector=True, reduction=("+", f"sum{r}")),
            Stmt(f"inv[{r}] = ({w})1 / sum{r};"),
        ]
    nodes += [
        Stmt(f"alignas(64) {w} out[{ROWS}][{ev}];"),
        # lanes are value columns, the keys run inside
        Loop("c", str(ev), [
            Stmt(f"{w} {acc};"),
            Loop("s", str(source), [
                Stmt(f"const {w} vv = {kc.ptr(v)}[vo + s * {ev} + c];"),
                *[Stmt(f"a{r} += sc[{r}][s] * vv;") for r in rows],
            ]),
            *[Stmt(f"out[{r}][c] = a{r} * inv[{r}];") for r in rows],
        ], vector=True),
        Loop("r", str(ROWS), [
            Stmt("const int64_t lr = l + r;"),
            Loop("c", str(ev), [Emit(f"({t})out[r][c]", (*bvars, "lr", "c"))], vector=True),
        ]),
    ]
    return nodes
