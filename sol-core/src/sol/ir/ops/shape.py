"""Data-movement ops (module DFP): reshape, permute, concat, split, slice, pad, expand.

Shape attributes may contain sympy expressions in `BATCH`; `sol.ir.interpret`
substitutes the concrete batch into attrs before calling a reference, so the
references below only ever see ints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import SolUnsupportedError
from ..graph import Dim, TensorType, as_size
from ..registry import op
from ._shapes import ceildiv, normalize_axis, reshape_dims, size_eq


@op("reshape")
class Reshape:
    """Reshape to attrs["shape"] (tuple of sizes; BATCH expressions allowed, no -1)."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        shape = tuple(as_size(s) for s in attrs["shape"])
        numel: Any = 1
        for s in shape:
            numel = numel * s
        src: Any = 1
        for s in x.shape:
            src = src * s
        if not size_eq(as_size(numel), as_size(src)):
            raise SolUnsupportedError(f"reshape of {list(x.shape)} to {list(shape)} changes the number of elements")
        return [TensorType(reshape_dims(x.dims, shape), x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [inputs[0].reshape(tuple(int(s) for s in attrs["shape"]))]


@op("permute")
class Permute:
    """Reorder dims: output dim i is input dim attrs["perm"][i]."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        return [TensorType(tuple(x.dims[p] for p in attrs["perm"]), x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [np.ascontiguousarray(inputs[0].transpose(attrs["perm"]))]


@op("concat")
class Concat:
    """Concatenate any number of inputs along attrs["axis"]."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        first = inputs[0]
        axis = normalize_axis(attrs["axis"], first.rank)
        total: Any = 0
        for t in inputs:
            total = total + t.shape[axis]
        dims = list(first.dims)
        dims[axis] = Dim(as_size(total), first.dims[axis].purpose)
        return [TensorType(tuple(dims), first.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [np.concatenate(list(inputs), axis=attrs["axis"])]


@op("split")
class Split:
    """Split along attrs["axis"] into pieces of attrs["sizes"]; one output per piece."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        axis = normalize_axis(attrs["axis"], x.rank)
        outs = []
        for s in attrs["sizes"]:
            dims = list(x.dims)
            dims[axis] = Dim(as_size(s), x.dims[axis].purpose)
            outs.append(TensorType(tuple(dims), x.dtype))
        return outs

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        bounds = np.cumsum([int(s) for s in attrs["sizes"]])[:-1]
        return [np.ascontiguousarray(p) for p in np.split(inputs[0], bounds, axis=attrs["axis"])]


@op("slice")
class Slice:
    """x[start:stop:step] along attrs["axis"]; start/stop normalised (non-negative, clamped), step > 0."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        axis = normalize_axis(attrs["axis"], x.rank)
        dims = list(x.dims)
        size = ceildiv(as_size(attrs["stop"] - attrs["start"]), int(attrs["step"]))
        dims[axis] = Dim(as_size(size), x.dims[axis].purpose)
        return [TensorType(tuple(dims), x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        index = [slice(None)] * x.ndim
        index[attrs["axis"]] = slice(int(attrs["start"]), int(attrs["stop"]), int(attrs["step"]))
        return [np.ascontiguousarray(x[tuple(index)])]


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@op("pad")
class Pad:
    """Pad every dim by attrs["pads"] ((begin, end) per dim, non-negative); mode constant|reflect|replicate|circular; value."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        if attrs.get("mode", "constant") not in _PAD_MODES:
            raise SolUnsupportedError(f"pad mode {attrs['mode']!r} is not supported; use one of {sorted(_PAD_MODES)}")
        dims = tuple(Dim(as_size(d.size + b + e), d.purpose) for d, (b, e) in zip(x.dims, attrs["pads"], strict=True))
        return [TensorType(dims, x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        mode = _PAD_MODES[attrs.get("mode", "constant")]
        pads = [tuple(int(v) for v in p) for p in attrs["pads"]]
        if mode == "constant":
            return [np.pad(inputs[0], pads, mode="constant", constant_values=attrs.get("value", 0.0))]
        return [np.pad(inputs[0], pads, mode=mode)]


@op("expand")
class Expand:
    """Broadcast to attrs["shape"] (numpy broadcast_to semantics; leading dims may be added)."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        x = inputs[0]
        shape = [as_size(s) for s in attrs["shape"]]
        offset = len(shape) - x.rank
        dims = []
        for i, s in enumerate(shape):
            src = x.dims[i - offset] if i >= offset else None
            purpose = src.purpose if src is not None else Dim(s).purpose
            if src is not None and not size_eq(src.size, s) and src.size != 1:
                raise SolUnsupportedError(f"cannot expand {list(x.shape)} to {shape}")
            dims.append(Dim(s, purpose))
        return [TensorType(tuple(dims), x.dtype)]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return [np.ascontiguousarray(np.broadcast_to(inputs[0], tuple(int(s) for s in attrs["shape"])))]
