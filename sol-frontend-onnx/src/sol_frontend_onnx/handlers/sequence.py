"""ONNX sequence ops whose structure is known at import: a sequence is a Python list of SOL tensors.

SOL compiles tensors only; sequences built and consumed inside the model
(SequenceConstruct -> SequenceAt, SplitToSequence -> ConcatFromSequence)
disappear at import. Sequences as model inputs or outputs are not supported.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sol.ir import Tensor

from ..errors import NeedsStaticBatch
from ._registry import handler
from ._util import norm_axis, reshape, unsqueeze


class TensorSequence(list):  # type: ignore[type-arg]
    """The value of an ONNX sequence: its tensors, in order."""


def _sequence(ctx: Any, index: int) -> TensorSequence:
    value = ctx.input(index)
    if not isinstance(value, TensorSequence):
        raise ctx.unsupported(f"input {index} must be a sequence")
    return value


def _position(ctx: Any, index: int, length: int, default: int) -> int:
    tensor = ctx.input(index)
    position = default if tensor is None else int(np.asarray(ctx.static(tensor, "the position")).reshape(-1)[0])
    return position + length if position < 0 else position


@handler("SequenceEmpty")
def sequence_empty(ctx: Any) -> TensorSequence:
    return TensorSequence()


@handler("SequenceConstruct")
def sequence_construct(ctx: Any) -> TensorSequence:
    return TensorSequence(t for t in ctx.inputs if t is not None)


@handler("SequenceInsert")
def sequence_insert(ctx: Any) -> TensorSequence:
    seq = _sequence(ctx, 0)
    result = TensorSequence(seq)
    result.insert(_position(ctx, 2, len(seq), len(seq)), ctx.need(1))
    return result


@handler("SequenceErase")
def sequence_erase(ctx: Any) -> TensorSequence:
    seq = _sequence(ctx, 0)
    result = TensorSequence(seq)
    del result[_position(ctx, 1, len(seq), len(seq) - 1)]
    return result


@handler("SequenceAt")
def sequence_at(ctx: Any) -> Tensor:
    seq = _sequence(ctx, 0)
    return ctx.one("identity", [seq[_position(ctx, 1, len(seq), 0)]])


@handler("SequenceLength")
def sequence_length(ctx: Any) -> Tensor:
    return ctx.const(np.asarray(len(_sequence(ctx, 0)), dtype=np.int64))


@handler("SplitToSequence")
def split_to_sequence(ctx: Any) -> TensorSequence:
    x = ctx.need(0)
    axis = norm_axis(int(ctx.attr("axis", 0)), x.rank)
    extent = x.shape[axis]
    if not isinstance(extent, int):
        raise NeedsStaticBatch("splitting the batch dim into a sequence")
    split = ctx.input(1)
    if split is None:
        sizes, squeeze = [1] * extent, not ctx.attr("keepdims", 1)
    else:
        given = np.asarray(ctx.static(split, "split")).reshape(-1 if np.ndim(ctx.static(split)) else 1)
        if np.ndim(ctx.static(split)) == 0:
            chunk = int(given[0])
            sizes = [chunk] * (extent // chunk) + ([extent % chunk] if extent % chunk else [])
        else:
            sizes = [int(s) for s in given]
        squeeze = False
    parts = ctx.layer("split", [x], {"axis": axis, "sizes": tuple(sizes)}) if len(sizes) > 1 else [x]
    if squeeze:
        parts = [reshape(ctx, p, tuple(s for i, s in enumerate(p.shape) if i != axis)) for p in parts]
    return TensorSequence(parts)


@handler("ConcatFromSequence")
def concat_from_sequence(ctx: Any) -> Tensor:
    seq = _sequence(ctx, 0)
    if not seq:
        raise ctx.unsupported("concatenating an empty sequence")
    new_axis = bool(ctx.attr("new_axis", 0))
    rank = seq[0].rank + int(new_axis)
    axis = norm_axis(int(ctx.attr("axis")), rank)
    parts = [unsqueeze(ctx, t, [axis]) for t in seq] if new_axis else list(seq)
    return ctx.one("concat", parts, {"axis": axis}) if len(parts) > 1 else ctx.one("identity", parts)
