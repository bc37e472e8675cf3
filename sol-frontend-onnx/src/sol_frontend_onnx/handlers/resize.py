"""Resize / Upsample as separable per-axis maps.

Every Resize variant (nearest, linear, cubic; each coordinate transform,
antialias, exclude_outside) is linear in the input and separable by axis:
along one axis the output is ``W @ x (+ b)`` with a constant ``W[out, in]``.
``W`` is obtained by resizing the identity matrix with ONNX's own reference
implementation, so SOL follows the specification exactly, and becomes a
gather (nearest: every row of ``W`` picks one input) or a matmul (the
interpolating modes). ``b`` carries tf_crop_and_resize's extrapolation value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator
from sol.ir import Tensor

from ..errors import NeedsStaticBatch
from ._registry import handler
from ._util import norm_axis

_RESIZE_ATTRS = ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                 "extrapolation_value", "antialias")


#: elements of the reference problem behind one axis of a keep_aspect_ratio_policy resize (see `_axis_map`)
_MAX_POLICY_MAP = 1 << 22


def _axis_map(attrs: dict[str, Any], size: int, out: int, scale: float | None, roi: tuple[float, float] | None,
              policy: tuple[str, int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(W [out, size], b [out]) of one axis, from ONNX's reference Resize of the identity and of zeros.

    ``policy``: (keep_aspect_ratio_policy, size, requested size) of the axis that decides the policy's
    scale; the identity then gets that axis as a third dim, constant along it, and the reference
    resizes dims 0 and 2 under the policy (requested sizes ``out`` and the other's). Along the third
    dim every output is an interpolation of equal values, so index 0 of it is the map.
    """
    data = np.concatenate([np.eye(size), np.zeros((size, 1))], axis=1).astype(np.float64)
    if policy is not None:
        data = np.repeat(data[:, :, None], policy[1], axis=2)
        attrs = {**attrs, "keep_aspect_ratio_policy": policy[0], "axes": [0, 2]}
    names = ["x", "roi" if roi is not None else "", "scales" if scale is not None else ""]
    node = helper.make_node("Resize", names + (["sizes"] if scale is None else []), ["y"], **attrs)
    feeds: dict[str, np.ndarray] = {"x": data}
    graph_inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, list(data.shape))]
    if roi is not None:
        feeds["roi"] = np.asarray([roi[0], 0.0, roi[1], 1.0], dtype=np.float32)  # (starts, ends) of dims 0 and 1 or 2
        graph_inputs.append(helper.make_tensor_value_info("roi", onnx.TensorProto.FLOAT, [4]))
    if scale is not None:
        feeds["scales"] = np.asarray([scale, 1.0], dtype=np.float32)
        graph_inputs.append(helper.make_tensor_value_info("scales", onnx.TensorProto.FLOAT, [2]))
    else:
        requested = [out, size + 1] if policy is None else [out, policy[2]]
        feeds["sizes"] = np.asarray(requested, dtype=np.int64)
        graph_inputs.append(helper.make_tensor_value_info("sizes", onnx.TensorProto.INT64, [2]))
    graph = helper.make_graph([node], "axis", graph_inputs, [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (result,) = ReferenceEvaluator(model).run(None, feeds)
    result = np.asarray(result, dtype=np.float64)
    if policy is not None:
        result = result[:, :, 0]
    weights, bias = result[:, :size].copy(), result[:, size]
    # a row outside tf_crop_and_resize's roi is the extrapolation value in every column (the zero column too,
    # which is exact 0 in every other row): its weights are 0 and the value is the bias
    weights[bias != 0] = 0.0
    return weights, bias


def _apply(ctx: Any, x: Tensor, axis: int, weights: np.ndarray, bias: np.ndarray) -> Tensor:
    out, size = weights.shape
    if out == size and np.array_equal(weights, np.eye(size)) and not bias.any():
        return x
    picks = weights.argmax(axis=1)
    if not bias.any() and np.array_equal(weights, np.eye(size)[picks]):
        return ctx.one("gather", [x, ctx.const(picks.astype(np.int64))], {"axis": axis})
    if not x.dtype.startswith("float"):
        raise ctx.unsupported("interpolating resize of an integer tensor")
    last = x.rank - 1
    perm = tuple(d for d in range(x.rank) if d != axis) + (axis,)
    moved = x if axis == last else ctx.one("permute", [x], {"perm": perm})
    y = ctx.one("matmul", [moved, ctx.const(weights.T.astype(x.dtype))])
    if bias.any():
        y = ctx.one("add", [y, ctx.const(bias.astype(x.dtype))])
    if axis == last:
        return y
    inverse = tuple(int(i) for i in np.argsort(perm))
    return ctx.one("permute", [y], {"perm": inverse})


def resize(ctx: Any, x: Tensor, attrs: dict[str, Any], scales: Sequence[float] | None, sizes: Sequence[int] | None,
           roi: Sequence[float] | None, axes: Sequence[int], outs: Sequence[int] | None = None) -> Tensor:
    """``outs``: output sizes that go with ``scales`` when they are not floor(size * scale) (aspect-ratio policies)."""
    result = x
    for i, axis in enumerate(axes):
        size = x.shape[axis]
        if not isinstance(size, int):
            if (scales is not None and scales[i] == 1.0) or (sizes is not None and sizes[i] == size):
                continue
            raise NeedsStaticBatch("resizing the batch dim")
        scale = float(scales[i]) if scales is not None else None
        if outs is not None:
            out = int(outs[i])
        else:
            out = int(np.floor(size * scale)) if scale is not None else int(sizes[i])  # type: ignore[index]
        axis_roi = (float(roi[i]), float(roi[i + len(axes)])) if roi is not None else None
        weights, bias = _axis_map(attrs, size, out, scale, axis_roi)
        result = _apply(ctx, result, axis, weights, bias)
    return result if result is not x else ctx.one("identity", [x])


@handler("Resize")
def resize_(ctx: Any) -> Tensor:
    x = ctx.need(0)
    attrs = {k: ctx.attr(k) for k in _RESIZE_ATTRS if ctx.attr(k) is not None}
    if ctx.opset < 11:
        roi_t, scales_t, sizes_t = None, ctx.need(1), None
    else:
        roi_t, scales_t, sizes_t = ctx.input(1), ctx.input(2), ctx.input(3)
    axes_attr = ctx.attr("axes")
    axes = [norm_axis(int(a), x.rank) for a in axes_attr] if axes_attr is not None else list(range(x.rank))
    scales = [float(s) for s in np.asarray(ctx.static(scales_t, "scales")).reshape(-1)] if scales_t is not None else []
    sizes = ctx.ints(sizes_t, "sizes") if sizes_t is not None else []
    roi = [float(r) for r in np.asarray(ctx.static(roi_t, "roi")).reshape(-1)] if roi_t is not None else []
    if ctx.sattr("coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize":
        roi = []
    policy = ctx.sattr("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch" and sizes:
        return _keep_aspect_ratio(ctx, x, attrs, policy, sizes, roi, axes)
    return resize(ctx, x, attrs, scales or None, sizes or None, roi or None, axes)


def _keep_aspect_ratio(ctx: Any, x: Tensor, attrs: dict[str, Any], policy: str, sizes: Sequence[int],
                       roi: Sequence[float], axes: Sequence[int]) -> Tensor:
    """not_larger / not_smaller: one scale for every resized axis (the smallest / largest of sizes / input).

    As ONNX's reference: the coordinate transform uses that scale, and each output size is
    round-half-up(scale * input size).
    """
    if policy not in ("not_larger", "not_smaller"):
        raise ctx.unsupported(f"keep_aspect_ratio_policy={policy!r} (ONNX knows stretch, not_larger, not_smaller)")
    shape = [x.shape[a] for a in axes]
    if not all(isinstance(d, int) for d in shape):
        raise NeedsStaticBatch("keep_aspect_ratio_policy over the batch dim")
    ratios = [int(n) / int(d) for n, d in zip(sizes, shape, strict=True)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    outs = [int(scale * int(d) + 0.5) for d in shape]
    if all(o == int(np.floor(scale * int(d))) for o, d in zip(outs, shape, strict=True)):
        return resize(ctx, x, attrs, [scale] * len(axes), None, roi or None, axes, outs)
    # A rounded-up size: a reference run with `scales` would size its output by floor, so each axis is
    # resized by the reference with the policy itself, next to the axis that decides the scale.
    deciding = ratios.index(scale)
    result = x
    for i, axis in enumerate(axes):
        size, other = int(shape[i]), (int(shape[deciding]), int(sizes[deciding]))
        if size * (size + 1) * other[0] > _MAX_POLICY_MAP:
            raise ctx.unsupported(f"keep_aspect_ratio_policy={policy!r} where the rounded output size {outs} "
                                  f"differs from floor(scale * size) on an axis this large ({size})")
        axis_roi = (float(roi[i]), float(roi[i + len(axes)])) if roi else None
        weights, bias = _axis_map(attrs, size, int(sizes[i]), None, axis_roi, policy=(policy, *other))
        result = _apply(ctx, result, axis, weights, bias)
    return result if result is not x else ctx.one("identity", [x])


@handler("Upsample")
def upsample(ctx: Any) -> Tensor:
    x = ctx.need(0)
    scales = ctx.attr("scales") if ctx.opset < 9 else np.asarray(ctx.static(ctx.need(1), "scales")).reshape(-1)
    mode = ctx.sattr("mode", "nearest")
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    return resize(ctx, x, attrs, [float(s) for s in scales], None, None, list(range(x.rank)))

