"""Which operand views (`sol.codegen.views`) oneDNN's matmul reads and writes where they lie.

Attention's q, k and v are slices of one projection, permuted from [L, heads,
E] to [heads, L, E]; the product with v is permuted back. oneDNN 3.2's
brgemm matmul (AMX in bf16, AVX-512 in fp32) reads its operands in four
dense memory orders of the logical [B, heads, M, K]: plain (``abcd``), the
last two dims swapped (``abdc``), and the heads outside the rows
(``acbd``, ``adbc``: [B, M, heads, K] in memory, what the permutes make);
it writes plain or ``acbd``. A view in one of those orders, at any offset,
needs no copy: the call reads (writes) the permutes' source (result)
directly. Any other order, or a view that is not dense (q as a slice of the
packed projection: rows 3x its width apart), keeps its copies, which
oneDNN's reference kernel would be far slower than.

Dims of size 1 go outermost in the order: that is where oneDNN's dense
formats put them (a format matches only with their strides too).
"""

from __future__ import annotations

from collections.abc import Sequence

import sol
from sol.codegen.views import View, dense_strides
from sol.records import ConfigKey

MATMUL_VIEWS_KEY = ConfigKey(
    "x86::matmul_views", bool, True,
    "Let oneDNN's matmul read its operands and write its result through the slices and permutes around it (attention's "
    "heads) where they lie, instead of copying them (ViT-B/16: seven copies per layer).")

#: memory orders (outermost first) of the operands oneDNN's brgemm matmul reads and writes, by rank
_READ = {2: {(0, 1), (1, 0)}, 3: {(0, 1, 2), (0, 2, 1)},
         4: {(0, 1, 2, 3), (0, 1, 3, 2), (0, 2, 1, 3), (0, 3, 1, 2)}}
_WRITTEN = {2: {(0, 1)}, 3: {(0, 1, 2)}, 4: {(0, 1, 2, 3), (0, 2, 1, 3)}}


def dense_order(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...] | None:
    """The memory order in which ``shape`` with ``strides`` is dense (dims of size 1 outermost, before the first
    larger dim that follows them), or None when its elements have gaps or overlap."""
    large = sorted((d for d in range(len(shape)) if shape[d] != 1), key=lambda d: -strides[d])
    order: list[int] = []
    for d in large:
        order += [u for u in range(d) if shape[u] == 1 and u not in order]
        order.append(d)
    order += [u for u in range(len(shape)) if u not in order]
    dense = dense_strides(shape, order)
    if any(dense[d] != strides[d] for d in large):
        return None
    return tuple(order)


def padded_order(order: Sequence[int], rank: int) -> tuple[int, ...]:
    """``order`` of a tensor broadcast to ``rank`` dims (leading dims of size 1 added, outermost)."""
    extra = rank - len(order)
    return (*range(extra), *(d + extra for d in order))


def swapped_order(order: Sequence[int]) -> tuple[int, ...]:
    """The memory order of the same memory described with the last two dims swapped (MatMul's ``transpose_b``)."""
    rank = len(order)
    swap = {rank - 2: rank - 1, rank - 1: rank - 2}
    return tuple(swap.get(d, d) for d in order)


def operand_order(view: View, rank: int, transposed: bool = False) -> tuple[int, ...] | None:
    """The memory order oneDNN is given for a matmul operand read through ``view`` (as a ``rank``-dim tensor, its
    last two dims swapped when ``transposed``), or None when the view is not dense."""
    order = dense_order(view.shape, view.strides)
    if order is None:
        return None
    order = padded_order(order, rank)
    return swapped_order(order) if transposed else order


def enabled() -> bool:
    return bool(sol.config.get(MATMUL_VIEWS_KEY.name, MATMUL_VIEWS_KEY.default))


def settings() -> str:
    """What decides the views besides the graph (for cache keys of generated code)."""
    return f"matmul views {int(enabled())}"


def reads(view: View, rank: int, transposed: bool) -> bool:
    """Whether oneDNN's matmul reads an operand through ``view`` in one of its fast formats."""
    order = operand_order(view, rank, transposed)
    return order is not None and order in _READ.get(rank, set())


def writes(view: View, rank: int) -> bool:
    """Whether oneDNN's matmul writes its result through ``view`` in one of its fast formats."""
    order = operand_order(view, rank)
    return order is not None and order in _WRITTEN.get(rank, set())
