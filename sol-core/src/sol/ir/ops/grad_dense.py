"""Gradient rules of the library-call ops: conv, conv_transpose, linear, matmul, and attention."""

from __future__ import annotations

import numpy as np

from ...errors import SolUnsupportedError
from ..graph import Layer, Tensor
from ..registry import gradient
from . import attention, conv  # noqa: F401  (the ops must be registered before their rules)
from ._grad import GradBuilder, scalar, sum_to

Grads = list[Tensor | None]


def _spatial_sizes(t: Tensor, layer: Layer) -> list[int]:
    sizes = t.shape[2:]
    if not all(isinstance(s, int) for s in sizes):
        raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of {layer.op} needs static spatial sizes")
    return [int(s) for s in sizes]


def _bias_grad(b: GradBuilder, dy: Tensor) -> Tensor:
    return b.one("reduce_sum", [dy], {"axes": (0, *range(2, dy.rank)), "keepdims": False})


@gradient("conv")
def _conv(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    x, w = layer.inputs[0], layer.inputs[1]
    out: Grads = [None] * len(layer.inputs)
    if dy is None:
        return out
    attrs = layer.attrs
    kernel = tuple(int(k) for k in w.shape[2:])
    if b.wants(x):
        # the input gradient of a conv is the transposed conv with the same weights (its adjoint)
        outs, ins = _spatial_sizes(dy, layer), _spatial_sizes(x, layer)
        pads, extra = [], []
        for i, (begin, _end) in enumerate(attrs["padding"]):
            covered = (outs[i] - 1) * attrs["stride"][i] + attrs["dilation"][i] * (kernel[i] - 1) + 1
            output_padding = ins[i] + 2 * begin - covered
            if output_padding < 0:
                raise SolUnsupportedError(f"layer {layer.name!r}: the input gradient of a conv with more padding at the "
                                          "end than at the beginning is not supported yet")
            pads.append(int(begin))
            extra.append(int(output_padding))
        out[0] = b.one("conv_transpose", [dy, b.fwd(w)], {
            "stride": tuple(attrs["stride"]), "padding": tuple(pads), "output_padding": tuple(extra),
            "dilation": tuple(attrs["dilation"]), "groups": int(attrs["groups"]),
            # a library may run it as the conv's backward-data (oneDNN: any padding, the conv's weights format)
            "conv_input_grad": True})
    if b.wants(w):
        out[1] = b.one("conv_grad_weight", [b.fwd(x), dy], {
            "stride": tuple(attrs["stride"]), "padding": tuple(tuple(p) for p in attrs["padding"]),
            "dilation": tuple(attrs["dilation"]), "groups": int(attrs["groups"]), "kernel": kernel})
    if len(layer.inputs) > 2 and b.wants(layer.inputs[2]):
        out[2] = _bias_grad(b, dy)
    return out


@gradient("conv_transpose")
def _conv_transpose(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    x, w = layer.inputs[0], layer.inputs[1]
    out: Grads = [None] * len(layer.inputs)
    if dy is None:
        return out
    attrs = layer.attrs
    conv_attrs = {"stride": tuple(attrs["stride"]), "padding": tuple((int(p), int(p)) for p in attrs["padding"]),
                  "dilation": tuple(attrs["dilation"]), "groups": int(attrs["groups"])}
    if b.wants(x):
        (dx,) = b.layer("conv", [dy, b.fwd(w)], conv_attrs)
        # the conv over dy may see a few more positions than x has (output_padding): crop them
        for axis, size in enumerate(x.shape[2:], start=2):
            if dx.shape[axis] != size:
                dx = b.one("slice", [dx], {"axis": axis, "start": 0, "stop": size, "step": 1})
        out[0] = dx
    if b.wants(w):
        # a transposed conv is the adjoint of conv(., w) from its output to its input: swap the roles
        out[1] = b.one("conv_grad_weight", [dy, b.fwd(x)], dict(conv_attrs, kernel=tuple(int(k) for k in w.shape[2:])))
    if len(layer.inputs) > 2 and b.wants(layer.inputs[2]):
        out[2] = _bias_grad(b, dy)
    return out


@gradient("linear")
def _linear(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    x, w = layer.inputs[0], layer.inputs[1]
    out: Grads = [None] * len(layer.inputs)
    if dy is None:
        return out
    if b.wants(x):
        # a library may run it as the linear's backward-data (oneDNN: the forward's weights as they lie)
        out[0] = b.one("matmul", [dy, b.fwd(w)], {"linear_input_grad": True})
    if b.wants(w):
        if x.rank == 1:
            out[1] = b.one("matmul", [b.one("reshape", [dy], {"shape": (dy.shape[-1], 1)}),
                                      b.one("reshape", [b.fwd(x)], {"shape": (1, x.shape[-1])})])
        else:
            out[1] = b.one("linear_grad_weight", [b.fwd(x), dy])
    if len(layer.inputs) > 2 and b.wants(layer.inputs[2]):
        out[2] = b.one("reduce_sum", [dy], {"axes": tuple(range(dy.rank - 1)), "keepdims": False}) if dy.rank > 1 else dy
    return out


def _transposed(b: GradBuilder, t: Tensor) -> Tensor:
    perm = (*range(t.rank - 2), t.rank - 1, t.rank - 2)
    return b.one("permute", [t], {"perm": perm})


@gradient("matmul")
def _matmul(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    dy = grads[0]
    a, c = layer.inputs
    if dy is None:
        return [None, None]
    if a.rank < 2 or c.rank < 2:
        raise SolUnsupportedError(f"layer {layer.name!r}: the gradient of a matmul of a 1-d operand is not supported yet")
    ga = sum_to(b, b.one("matmul", [dy, _transposed(b, b.fwd(c))]), a.shape) if b.wants(a) else None
    gc = sum_to(b, b.one("matmul", [_transposed(b, b.fwd(a)), dy]), c.shape) if b.wants(c) else None
    return [ga, gc]


@gradient("attention")
def _attention(layer: Layer, grads: Grads, b: GradBuilder) -> Grads:
    """Recompute the attention weights p (cheaper than saving [L, S] per head), then the softmax/matmul adjoints."""
    do = grads[0]
    if do is None:
        return [None] * len(layer.inputs)
    q, k, v = (b.fwd(t) for t in layer.inputs[:3])
    scale = layer.attrs.get("scale")
    scale = 1.0 / float(np.sqrt(int(q.shape[-1]))) if scale is None else float(scale)
    scores = b.one("mul", [b.one("matmul", [q, _transposed(b, k)]), scalar(b, scale, q)])
    length, source = scores.shape[-2], scores.shape[-1]
    if layer.attrs.get("is_causal", False):
        causal = np.where(np.tril(np.ones((int(length), int(source)), dtype=bool)), 0.0, -np.inf).astype(q.dtype)
        scores = b.one("add", [scores, b.array(causal)])
    if len(layer.inputs) > 3:
        mask = b.fwd(layer.inputs[3])
        if mask.dtype == "bool":
            scores = b.one("where", [mask, scores, scalar(b, -np.inf, q)])
        else:
            scores = b.one("add", [scores, mask])
    p = b.one("softmax", [scores], {"axis": scores.rank - 1})
    dv = b.one("matmul", [_transposed(b, p), do])
    dp = b.one("matmul", [do, _transposed(b, v)])
    row = b.one("reduce_sum", [b.one("mul", [dp, p])], {"axes": (dp.rank - 1,), "keepdims": True})
    dscores = b.one("mul", [p, b.one("sub", [dp, row])])
    ds = b.one("mul", [dscores, scalar(b, scale, q)])
    dq = b.one("matmul", [ds, k])
    dk = b.one("matmul", [_transposed(b, ds), q])
    out: Grads = [sum_to(b, g, t.shape) if b.wants(t) else None for g, t in zip((dq, dk, dv), layer.inputs[:3], strict=True)]
    if len(layer.inputs) > 3:
        mask = layer.inputs[3]  # an additive float mask gets the gradient of the scores
        out.append(sum_to(b, dscores, mask.shape) if b.wants(mask) and mask.dtype != "bool" else None)
    return out
