"""Interpolation (F.interpolate / nn.Upsample): nearest, nearest-exact, (bi/tri)linear and bicubic, 1-3 spatial dims,
and bilinear/bicubic with antialias=True.

Each spatial dim is resampled on its own (all these modes are separable): the source rows each output row reads and
their weights depend only on the sizes, so they are computed here, with PyTorch's own index rules, and become
constants. A dim is then a `gather` of the taps along that axis times their weights, summed; nearest with an
integer factor is a broadcast instead. Shape rules, references, gradients (gather's is a scatter-add) and generated
code are those of gather, mul and add, so the whole upsample fuses into the surrounding Cluster.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sol.errors import SolUnsupportedError
from sol.ir import Tensor

from ._registry import Context, aten

#: PyTorch's bicubic convolution coefficient (upsample_bicubic2d)
CUBIC_A = -0.75


def _source_scale(size_in: int, size_out: int, align_corners: bool, scale: float | None) -> float:
    """PyTorch's area_pixel_compute_scale: how far one output step moves in the input."""
    if align_corners:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else size_in / size_out


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """The four taps' weights of Keys' cubic convolution at fractional offset t (taps at -1, 0, 1, 2)."""
    a = CUBIC_A

    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def taps(mode: str, size_in: int, size_out: int, align_corners: bool, scale: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each [size_out, taps]: output row i is sum_k weights[i, k] * input[indices[i, k]]."""
    out = np.arange(size_out, dtype=np.float64)
    step = _source_scale(size_in, size_out, align_corners and mode not in ("nearest", "nearest-exact"), scale)
    if mode == "nearest":
        index = np.minimum(np.floor(out * step).astype(np.int64), size_in - 1)
        return index[:, None], np.ones((size_out, 1))
    if mode == "nearest-exact":
        index = np.minimum(np.floor((out + 0.5) * step).astype(np.int64), size_in - 1)
        return index[:, None], np.ones((size_out, 1))
    if mode == "linear":
        source = out * step if align_corners else np.maximum((out + 0.5) * step - 0.5, 0.0)
        low = np.minimum(np.floor(source).astype(np.int64), size_in - 1)
        high = np.minimum(low + 1, size_in - 1)
        frac = source - low
        return np.stack([low, high], axis=-1), np.stack([1 - frac, frac], axis=-1)
    if mode == "cubic":
        source = out * step if align_corners else (out + 0.5) * step - 0.5
        base = np.floor(source).astype(np.int64)
        index = np.clip(base[:, None] + np.arange(-1, 3)[None, :], 0, size_in - 1)
        return index, _cubic_weights(source - base)
    if mode in ("linear-aa", "cubic-aa"):
        return _antialiased_taps(mode, size_in, size_out, align_corners, scale)
    raise SolUnsupportedError(f"interpolation mode {mode!r} is not supported")


def _aa_filter(mode: str, x: np.ndarray) -> np.ndarray:
    """PyTorch's (Pillow's) antialiasing filters: the triangle, and Keys' cubic with a = -0.5."""
    x = np.abs(x)
    if mode == "linear-aa":
        return np.where(x < 1, 1 - x, 0.0)
    a = -0.5
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def _antialiased_taps(mode: str, size_in: int, size_out: int, align_corners: bool,
                      scale: float | None) -> tuple[np.ndarray, np.ndarray]:
    """antialias=True: when shrinking, the filter widens by the scale (PyTorch's _compute_weights_aa), so every
    input row contributes; the taps per output row vary, the shorter rows are padded with zero weights."""
    step = _source_scale(size_in, size_out, align_corners, scale)
    width = 2 if mode == "linear-aa" else 4
    support = width * 0.5 * step if step >= 1.0 else width * 0.5
    invscale = 1.0 / step if step >= 1.0 else 1.0
    rows = []
    for i in range(size_out):
        center = step * (i + 0.5)
        low = max(int(center - support + 0.5), 0)
        count = min(int(center + support + 0.5), size_in) - low
        weights = _aa_filter(mode, (np.arange(count) + low - center + 0.5) * invscale)
        total = weights.sum()
        rows.append((low + np.arange(count), weights / total if total != 0 else weights))
    most = max(len(r[0]) for r in rows)
    index = np.zeros((size_out, most), dtype=np.int64)
    weight = np.zeros((size_out, most))
    for i, (idx, w) in enumerate(rows):
        index[i, :len(idx)], weight[i, :len(w)] = idx, w
        index[i, len(idx):] = idx[-1] if len(idx) else 0
    return index, weight


def _resample_axis(cx: Context, x: Tensor, d: int, size_out: int, mode: str, align_corners: bool,
                   scale: float | None) -> Tensor:
    size_in = x.shape[d]
    if not isinstance(size_in, int):
        raise SolUnsupportedError("interpolating along the wildcard batch dimension is not supported")
    if size_in == size_out and (mode.startswith("nearest") or align_corners or scale in (None, 1.0)) \
            and not mode.endswith("-aa"):
        return x
    if mode == "nearest" and size_out % size_in == 0 and (scale is None or scale == size_out // size_in):
        factor = size_out // size_in  # each row repeated: a broadcast, no gather
        shape = tuple(x.shape)
        y = cx.one("reshape", [x], {"shape": (*shape[:d + 1], 1, *shape[d + 1:])})
        y = cx.one("expand", [y], {"shape": (*shape[:d + 1], factor, *shape[d + 1:])})
        return cx.one("reshape", [y], {"shape": (*shape[:d], size_out, *shape[d + 1:])})
    index, weight = taps(mode, size_in, size_out, align_corners, scale)
    total = None
    trailing = (1,) * (x.rank - d - 1)
    for k in range(index.shape[1]):
        column = index[:, k]
        picked = cx.one("gather", [x, cx.graph.add_const(f"resample_index{d}_{k}", column)], {"axis": d})
        if np.all(weight[:, k] == 1.0):
            term = picked
        else:
            w = cx.graph.add_const(f"resample_weight{d}_{k}", weight[:, k].reshape(size_out, *trailing).astype(x.dtype))
            term = cx.one("mul", [picked, w])
        total = term if total is None else cx.one("add", [total, term])
    assert total is not None
    return total


def interpolate(cx: Context, x: Tensor, mode: str, align_corners: bool, scales: list[float | None]) -> Tensor:
    if not x.dtype.startswith(("float", "bfloat")) and mode not in ("nearest", "nearest-exact"):
        raise SolUnsupportedError(f"{mode} interpolation of a {x.dtype} tensor is not supported")
    shape = cx.meta_shape()
    spatial = len(scales)
    for k in range(spatial):
        d = x.rank - spatial + k
        size_out = shape[d]
        if not isinstance(size_out, int):
            raise SolUnsupportedError("interpolating to a size that depends on the wildcard batch is not supported")
        x = _resample_axis(cx, x, d, size_out, mode, align_corners, scales[k])
    return x


def _scales(args: tuple[Any, ...], spatial: int) -> list[float | None]:
    """The per-dim scale factors of the non-.vec overloads (trailing optional floats), or Nones."""
    found = [a for a in args if isinstance(a, float) or a is None]
    found = (found + [None] * spatial)[:spatial]
    return [None if s is None or (isinstance(s, float) and math.isnan(s)) else float(s) for s in found]


def _register(name: str, mode: str, spatial: int, aligned: bool) -> None:
    @aten(name)
    def upsample(cx: Context, x: Tensor, output_size: Any = None, *rest: Any, **kwargs: Any) -> Tensor:
        align_corners = bool(rest[0]) if aligned and rest else bool(kwargs.get("align_corners", False))
        tail = rest[1:] if aligned else rest
        factors = kwargs.get("scale_factors")
        if tail and isinstance(tail[0], (list, tuple)):  # the .vec overload: (output_size, [align,] scale_factors)
            factors = tail[0]
        if factors is not None:
            scales = [float(f) for f in factors]
            scales = (scales * spatial)[:spatial] if len(scales) == 1 else scales
        else:
            scales = _scales(tuple(tail), spatial)
        return interpolate(cx, x, mode, align_corners, scales)


for _n, _dims in (("1d", 1), ("2d", 2), ("3d", 3)):
    _register(f"upsample_nearest{_n}", "nearest", _dims, aligned=False)
    _register(f"_upsample_nearest_exact{_n}", "nearest-exact", _dims, aligned=False)
_register("upsample_linear1d", "linear", 1, aligned=True)
_register("upsample_bilinear2d", "linear", 2, aligned=True)
_register("upsample_trilinear3d", "linear", 3, aligned=True)
_register("upsample_bicubic2d", "cubic", 2, aligned=True)
_register("_upsample_bilinear2d_aa", "linear-aa", 2, aligned=True)
_register("_upsample_bicubic2d_aa", "cubic-aa", 2, aligned=True)
