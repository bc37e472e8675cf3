"""Einsum onto registry ops: diagonals, permutes, one broadcast product and a sum over the contracted labels.

Each operand's repeated labels become diagonals (a product with an identity
mask summed over one of the two axes); every operand is then permuted to
one common label order (the output's labels first) with size-1 dims for the
labels it lacks, the operands are multiplied with broadcasting, and the
contracted labels are summed. The product holds every label's extent at
once: fine for the small contractions einsum usually writes, a matmul is
the better translation for large ones (TODO when a model needs it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.ir import Size, Tensor

from ._registry import handler
from ._util import reshape


def _terms(ctx: Any, equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Labels per operand and of the output, with "..." expanded to private labels (right-aligned)."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    parts = lhs.split(",")
    if len(parts) != len(ranks):
        raise ctx.unsupported(f"equation {equation!r} names {len(parts)} operands, the node has {len(ranks)}")
    spans = [rank - len(p.replace("...", "")) if "..." in p else 0 for p, rank in zip(parts, ranks, strict=True)]
    ellipsis = max(spans, default=0)
    extra = [chr(0x100 + k) for k in range(ellipsis)]
    terms = []
    for part, span in zip(parts, spans, strict=True):
        before, dots, after = part.partition("...")
        labels = list(before) + (extra[ellipsis - span:] if dots else []) + list(after)
        terms.append(labels)
    if arrow:
        before, dots, after = rhs.partition("...")
        output = list(before) + (extra if dots else []) + list(after)
    else:
        counts: dict[str, int] = {}
        for labels in terms:
            for label in labels:
                counts[label] = counts.get(label, 0) + 1
        output = extra + sorted(label for label, n in counts.items() if n == 1 and label not in extra)
    return terms, output


def _diagonal(ctx: Any, x: Tensor, labels: list[str]) -> tuple[Tensor, list[str]]:
    """Repeated labels of one operand -> its diagonal along them."""
    while len(set(labels)) != len(labels):
        first = next(i for i, label in enumerate(labels) if labels.index(label) != i)
        p, q = labels.index(labels[first]), first
        n = int(x.shape[p])
        mask_shape = [1] * x.rank
        mask_shape[p] = mask_shape[q] = n
        mask = ctx.const(np.eye(n, dtype=x.dtype).reshape(mask_shape), name="diagonal")
        x = ctx.one("reduce_sum", [ctx.one("mul", [x, mask])], {"axes": (q,), "keepdims": False})
        labels = labels[:q] + labels[q + 1:]
    return x, labels


@handler("Einsum")
def einsum(ctx: Any) -> Tensor:
    operands = [ctx.need(i) for i in range(len(ctx.node.input))]
    terms, output = _terms(ctx, ctx.sattr("equation", ""), [t.rank for t in operands])
    order = list(output) + sorted({label for labels in terms for label in labels} - set(output))
    aligned = []
    for x, labels in zip(operands, terms, strict=True):
        x, labels = _diagonal(ctx, x, labels)
        present = [label for label in order if label in labels]
        perm = tuple(labels.index(label) for label in present)
        if perm != tuple(range(len(perm))):
            x = ctx.one("permute", [x], {"perm": perm})
        sizes = dict(zip(present, x.shape, strict=True))
        shape: list[Size] = [sizes.get(label, 1) for label in order]
        aligned.append(reshape(ctx, x, shape) if len(shape) != x.rank else x)
    result = aligned[0]
    for other in aligned[1:]:
        result = ctx.one("mul", [result, other])
    contracted = tuple(range(len(output), len(order)))
    if contracted:
        result = ctx.one("reduce_sum", [result], {"axes": contracted, "keepdims": False})
    return result if result is not operands[0] else ctx.one("identity", [result])
