"""Shape and data-movement ONNX ops; shape arithmetic folds into constants at import."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper
from sol.ir import Size, Tensor, as_size
from sol.ir.ops import product

from ..dtypes import from_onnx
from ..errors import NeedsStaticBatch
from ._registry import handler
from ._util import norm_axis, reshape, unsqueeze


def _static_shape(ctx: Any, x: Tensor) -> tuple[int, ...]:
    if not x.is_static:
        raise NeedsStaticBatch(f"the shape of {x.name} depends on the batch size")
    return tuple(int(s) for s in x.shape)


@handler("Constant")
def constant(ctx: Any) -> Tensor:
    for name, kind in (("value_float", np.float32), ("value_int", np.int64), ("value_floats", np.float32),
                       ("value_ints", np.int64)):
        if ctx.attr(name) is not None:
            return ctx.const(np.asarray(ctx.attr(name), dtype=kind))
    value = ctx.attr("value")
    if value is None:
        raise ctx.unsupported("only value, value_float(s) and value_int(s) constants are supported")
    return ctx.const(numpy_helper.to_array(value))


@handler("ConstantOfShape")
def constant_of_shape(ctx: Any) -> Tensor:
    shape = ctx.ints(ctx.need(0), "the shape")
    value = ctx.attr("value")
    fill = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    return ctx.const(np.full(tuple(shape), fill[0], dtype=fill.dtype))


@handler("Shape")
def shape(ctx: Any) -> Tensor:
    dims = _static_shape(ctx, ctx.need(0))
    start, end = ctx.attr("start", 0), ctx.attr("end")
    return ctx.const(np.asarray(dims[start:end], dtype=np.int64))


@handler("Size")
def size(ctx: Any) -> Tensor:
    return ctx.const(np.asarray(int(np.prod(_static_shape(ctx, ctx.need(0)))), dtype=np.int64))


@handler("Range")
def range_(ctx: Any) -> Tensor:
    start, limit, delta = (ctx.static(ctx.need(i), "range bounds") for i in range(3))
    return ctx.const(np.arange(start, limit, delta, dtype=start.dtype))


@handler("EyeLike")
def eye_like(ctx: Any) -> Tensor:
    x = ctx.need(0)
    rows, cols = _static_shape(ctx, x)
    dtype = x.dtype if ctx.attr("dtype") is None else from_onnx(int(ctx.attr("dtype")), "the EyeLike dtype")
    return ctx.const(np.eye(rows, cols, k=int(ctx.attr("k", 0)), dtype=dtype))


def _target_shape(x: Tensor, shape: list[int], allowzero: bool) -> list[Size]:
    out: list[Size] = [x.shape[i] if s == 0 and not allowzero else s for i, s in enumerate(shape)]
    if -1 in shape:
        known = product([s for s in out if not (isinstance(s, int) and s == -1)])
        out[shape.index(-1)] = as_size(product(x.shape) / known)
    return out


@handler("Reshape")
def reshape_(ctx: Any) -> Tensor:
    x = ctx.need(0)
    wanted = ctx.ints(ctx.need(1), "the shape") if ctx.opset >= 5 else list(ctx.attr("shape"))
    return reshape(ctx, x, _target_shape(x, wanted, bool(ctx.attr("allowzero", 0))))


@handler("Flatten")
def flatten(ctx: Any) -> Tensor:
    x = ctx.need(0)
    axis = norm_axis(int(ctx.attr("axis", 1)), x.rank)
    return reshape(ctx, x, (product(x.shape[:axis]), product(x.shape[axis:])))


def _axes(ctx: Any, input_index: int, since: int) -> list[int] | None:
    if ctx.opset >= since:
        return ctx.ints(ctx.input(input_index), "axes")
    axes = ctx.attr("axes")
    return list(axes) if axes is not None else None


@handler("Squeeze")
def squeeze(ctx: Any) -> Tensor:
    x = ctx.need(0)
    axes = _axes(ctx, 1, 13)
    if axes is None:
        keep = [s for s in x.shape if not (isinstance(s, int) and s == 1)]
    else:
        drop = {norm_axis(a, x.rank) for a in axes}
        keep = [s for i, s in enumerate(x.shape) if i not in drop]
    return reshape(ctx, x, keep) if tuple(keep) != tuple(x.shape) else ctx.one("identity", [x])


@handler("Unsqueeze")
def unsqueeze_(ctx: Any) -> Tensor:
    axes = _axes(ctx, 1, 13)
    if not axes:
        raise ctx.unsupported("axes are required")
    return unsqueeze(ctx, ctx.need(0), axes)


@handler("Transpose")
def transpose(ctx: Any) -> Tensor:
    x = ctx.need(0)
    perm = ctx.attr("perm")
    perm = list(perm) if perm is not None else list(range(x.rank))[::-1]
    return ctx.one("permute", [x], {"perm": tuple(int(p) for p in perm)})


@handler("Concat")
def concat(ctx: Any) -> Tensor:
    parts = [t for t in ctx.inputs if t is not None]
    axis = norm_axis(int(ctx.attr("axis", 0)), parts[0].rank)
    nonempty = [t for t in parts if not (isinstance(t.shape[axis], int) and t.shape[axis] == 0)] or parts[:1]
    if len(nonempty) == 1:
        return ctx.one("identity", nonempty)
    return ctx.one("concat", nonempty, {"axis": axis})


@handler("Split")
def split(ctx: Any) -> list[Tensor]:
    x = ctx.need(0)
    axis = norm_axis(int(ctx.attr("axis", 0)), x.rank)
    extent = x.shape[axis]
    sizes = ctx.ints(ctx.input(1), "split") if ctx.opset >= 13 else ctx.attr("split")
    if not sizes:
        if not isinstance(extent, int):
            raise NeedsStaticBatch("split along the batch dim")
        count = int(ctx.attr("num_outputs", ctx.num_outputs))
        chunk = -(-extent // count)
        sizes = [min(chunk, extent - i * chunk) for i in range(count)]
    return ctx.layer("split", [x], {"axis": axis, "sizes": tuple(int(s) for s in sizes)})


@handler("Slice")
def slice_(ctx: Any) -> Tensor:
    x = ctx.need(0)
    if ctx.opset >= 10:
        starts, ends = ctx.ints(ctx.need(1), "starts"), ctx.ints(ctx.need(2), "ends")
        axes = ctx.ints(ctx.input(3), "axes")
        steps = ctx.ints(ctx.input(4), "steps")
    else:
        starts, ends, axes, steps = list(ctx.attr("starts")), list(ctx.attr("ends")), ctx.attr("axes"), None
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    result = x
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        result = slice_axis(ctx, result, norm_axis(int(axis), x.rank), int(start), int(end), int(step))
    return result if result is not x else ctx.one("identity", [x])


def slice_axis(ctx: Any, x: Tensor, axis: int, start: int, end: int, step: int) -> Tensor:
    """x[start:end:step] along ``axis`` with Python's clamping; negative steps gather the indices."""
    extent = x.shape[axis]
    if not isinstance(extent, int):
        if start == 0 and step == 1 and end >= 2**31:
            return x
        raise NeedsStaticBatch("slicing the batch dim")
    begin, stop, stride = slice(start, end, step).indices(extent)
    picked = range(begin, stop, stride)
    if len(picked) == extent and stride == 1:
        return x
    if stride > 0:
        return ctx.one("slice", [x], {"axis": axis, "start": begin, "stop": begin + len(picked) * stride, "step": stride})
    return ctx.one("gather", [x, ctx.const(np.asarray(list(picked), dtype=np.int64))], {"axis": axis})


@handler("Expand")
def expand(ctx: Any) -> Tensor:
    x = ctx.need(0)
    wanted = ctx.ints(ctx.need(1), "the shape")
    rank = max(x.rank, len(wanted))
    ours = [1] * (rank - x.rank) + list(x.shape)
    theirs = [1] * (rank - len(wanted)) + wanted
    out = [a if (isinstance(b, int) and b == 1) else b for a, b in zip(ours, theirs, strict=True)]
    if tuple(out) == tuple(x.shape):
        return ctx.one("identity", [x])
    return ctx.one("expand", [x], {"shape": tuple(out)})


@handler("Tile")
def tile(ctx: Any) -> Tensor:
    x = ctx.need(0)
    repeats = ctx.ints(ctx.need(1), "repeats")
    # [a, b] tiled [r, s]: view as [1, a, 1, b], broadcast to [r, a, s, b], merge pairs
    spread: list[Size] = []
    target: list[Size] = []
    for s, r in zip(x.shape, repeats, strict=True):
        spread += [1, s]
        target += [r, s]
    expanded = ctx.one("expand", [reshape(ctx, x, spread)], {"shape": tuple(target)})
    return reshape(ctx, expanded, [as_size(r * s) for r, s in zip(repeats, x.shape, strict=True)])


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


@handler("Pad")
def pad(ctx: Any) -> Tensor:
    x = ctx.need(0)
    mode = ctx.sattr("mode", "constant")
    if mode not in _PAD_MODES:
        raise ctx.unsupported(f"pad mode {mode!r}")
    if ctx.opset >= 11:
        pads = ctx.ints(ctx.need(1), "pads")
        value_tensor = ctx.input(2)
        value = float(np.asarray(ctx.static(value_tensor, "the pad value")).reshape(-1)[0]) if value_tensor is not None else 0.0
        axes = ctx.ints(ctx.input(3), "axes")
    else:
        pads, value, axes = list(ctx.attr("pads" if ctx.opset >= 2 else "paddings")), float(ctx.attr("value", 0.0)), None
    axes = [norm_axis(a, x.rank) for a in axes] if axes is not None else list(range(x.rank))
    count = len(axes)
    per_dim = [(0, 0)] * x.rank
    for i, axis in enumerate(axes):
        per_dim[axis] = (pads[i], pads[i + count])
    # negative pads crop: slice first, then pad with the non-negative rest
    result = x
    for axis, (begin, end) in enumerate(per_dim):
        if begin < 0 or end < 0:
            extent = result.shape[axis]
            result = slice_axis(ctx, result, axis, max(0, -begin), extent - max(0, -end), 1)
    positive = tuple((max(0, b), max(0, e)) for b, e in per_dim)
    if all(p == (0, 0) for p in positive):
        return result if result is not x else ctx.one("identity", [x])
    if x.dtype == "bool" or not x.dtype.startswith("float"):
        value = int(value)
    return ctx.one("pad", [result], {"pads": positive, "mode": _PAD_MODES[mode], "value": value})


@handler("DepthToSpace")
def depth_to_space(ctx: Any) -> Tensor:
    x = ctx.need(0)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    if ctx.sattr("mode", "DCR") == "DCR":
        y = reshape(ctx, x, (n, b, b, as_size(c / (b * b)), h, w))
        y = ctx.one("permute", [y], {"perm": (0, 3, 4, 1, 5, 2)})
    else:
        y = reshape(ctx, x, (n, as_size(c / (b * b)), b, b, h, w))
        y = ctx.one("permute", [y], {"perm": (0, 1, 4, 2, 5, 3)})
    return reshape(ctx, y, (n, as_size(c / (b * b)), h * b, w * b))


@handler("SpaceToDepth")
def space_to_depth(ctx: Any) -> Tensor:
    x = ctx.need(0)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    y = reshape(ctx, x, (n, c, as_size(h / b), b, as_size(w / b), b))
    # DCR (the default): the block offset is the outer part of the new channel; CRD (opset 28): the inner part
    perm = (0, 3, 5, 1, 2, 4) if ctx.sattr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    y = ctx.one("permute", [y], {"perm": perm})
    return reshape(ctx, y, (n, c * b * b, as_size(h / b), as_size(w / b)))


@handler("Trilu")
def trilu(ctx: Any) -> Tensor:
    x = ctx.need(0)
    k = ctx.input(1)
    offset = int(np.asarray(ctx.static(k, "k")).reshape(-1)[0]) if k is not None else 0
    if x.rank < 2 or not all(isinstance(s, int) for s in x.shape[-2:]):
        raise ctx.unsupported("Trilu needs a tensor of rank >= 2 whose last two dims are fixed")
    rows, cols = int(x.shape[-2]), int(x.shape[-1])
    ones = np.ones((rows, cols), dtype=bool)
    mask = np.triu(ones, offset) if ctx.attr("upper", 1) else np.tril(ones, offset)
    zero = ctx.const(np.zeros((), dtype=x.dtype))
    return ctx.one("where", [ctx.const(mask), x, zero])


@handler("CenterCropPad")
def center_crop_pad(ctx: Any) -> Tensor:
    """Per axis: crop the centre (the odd pixel off the end) or pad around it (the odd pixel at the end)."""
    x = ctx.need(0)
    target = ctx.ints(ctx.need(1), "shape")
    axes_attr = ctx.attr("axes")
    axes = [norm_axis(int(a), x.rank) for a in axes_attr] if axes_attr is not None else list(range(x.rank))
    y = x
    pads = [(0, 0)] * x.rank
    for axis, size in zip(axes, target, strict=True):
        dim = x.shape[axis]
        if not isinstance(dim, int):
            raise NeedsStaticBatch("cropping or padding the batch dim")
        if size < dim:
            start = (dim - size) // 2
            y = slice_axis(ctx, y, axis, start, start + size, 1)
        elif size > dim:
            begin = (size - dim) // 2
            pads[axis] = (begin, size - dim - begin)
    if any(p != (0, 0) for p in pads):
        y = ctx.one("pad", [y], {"pads": tuple(pads), "mode": "constant", "value": 0 if not x.dtype.startswith("float") else 0.0})
    return y if y is not x else ctx.one("identity", [x])


@handler("ReverseSequence")
def reverse_sequence(ctx: Any) -> Tensor:
    """The first sequence_lens[b] steps of every batch element reversed: one gather_elements along time."""
    x = ctx.need(0)
    lengths = ctx.ints(ctx.need(1), "sequence_lens")
    batch_axis, time_axis = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    if not x.is_static:
        raise NeedsStaticBatch("reversing sequences of a wildcard batch")
    shape = [int(s) for s in x.shape]
    steps = np.arange(shape[time_axis])
    index = np.empty((shape[batch_axis], shape[time_axis]), dtype=np.int64)
    for b, n in enumerate(lengths):
        index[b] = np.where(steps < n, n - 1 - steps, steps)
    if batch_axis > time_axis:
        index = index.T
    view = [1] * x.rank
    view[batch_axis], view[time_axis] = shape[batch_axis], shape[time_axis]
    full = np.broadcast_to(index.reshape(view), shape)
    return ctx.one("gather_elements", [x, ctx.const(np.ascontiguousarray(full))], {"axis": time_axis})
