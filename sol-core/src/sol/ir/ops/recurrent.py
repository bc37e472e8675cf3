"""Recurrent layers (module DFP): LSTM, GRU and Elman RNN (tanh/relu), one layer in one direction.

Three ops, all time-major (``[T, N, ...]``); a frontend builds multi-layer,
bidirectional and batch-first models from them with permute/concat:

* ``rnn``: the whole layer, ``x[T,N,I]`` in, as PyTorch computes it. A
  library with RNN primitives (oneDNN's LSTM and linear-before-reset GRU,
  which is PyTorch's GRU) runs it in one call; everywhere else the planner
  splits it (`sol.codegen.lowering`) into a ``linear`` for the input
  projection of all time steps (one GEMM) and an ``rnn_recurrence``.
* ``rnn_recurrence``: the time loop over the projected inputs ``xp[T,N,G*H]``
  (G gates; ``b_ih`` already added); per step one product ``h @ w_hh^T`` of
  all gates at once, then the cell's elementwise math.
* ``rnn_recurrence_grad``: back-propagation through time, from the forward's
  outputs and, for LSTM/GRU, its *reserve* (the activated gates the backward
  needs, what cuDNN calls the reserve space). It returns the gradients of the
  projected inputs and of the recurrent pre-activations, from which ordinary
  layers (``linear_grad_weight``, ``matmul``, ``reduce_sum``) make the weight,
  bias and input gradients: GEMMs over all time steps at once.

Gate order and formulas are PyTorch's:

* lstm (G=4: i, f, g, o): ``c' = f*c + i*g``, ``h' = o*tanh(c')``; reserve
  ``[i, f, g, o, c']`` (5H).
* gru (G=3: r, z, n): ``n = tanh(xn + r*(W_hn h + b_hn))``,
  ``h' = (1-z)*n + z*h``; reserve ``[r, z, n, W_hn h + b_hn]`` (4H).
* rnn_tanh / rnn_relu (G=1): ``h' = act(x + W h + b)``; no reserve (the
  derivative follows from ``h'`` itself, which is the output).

attrs: ``mode`` (one of `MODES`), ``reverse`` (walk the time steps from last
to first: the backward direction of a bidirectional layer), ``save`` (also
return the reserve: set when the model is captured for training).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import SolUnsupportedError
from ..graph import Dim, Layer, Purpose, Tensor, TensorType
from ..registry import op
from ._grad import GradBuilder, zeros_like

#: mode -> gates per hidden unit
MODES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
#: mode -> floats per hidden unit of the reserve (0: none)
RESERVE = {"lstm": 5, "gru": 4, "rnn_tanh": 0, "rnn_relu": 0}


def mode_of(attrs: dict[str, Any]) -> str:
    mode = attrs.get("mode")
    if mode not in MODES:
        raise SolUnsupportedError(f"recurrent layer mode {mode!r} is not one of {sorted(MODES)}")
    return str(mode)


def has_cell(mode: str) -> bool:
    """Whether the layer carries a cell state besides h (LSTM's c)."""
    return mode == "lstm"


def saves_reserve(attrs: dict[str, Any]) -> bool:
    return bool(attrs.get("save", False)) and RESERVE[mode_of(attrs)] > 0


# -- input positions ---------------------------------------------------------------------------------------------

def forward_inputs(mode: str, full: bool) -> list[str]:
    """Names of the inputs of ``rnn`` (``full``) or ``rnn_recurrence``, in order."""
    state = ["h0", "c0"] if has_cell(mode) else ["h0"]
    return (["x", *state, "w_ih", "w_hh", "b_ih", "b_hh"] if full else ["xp", *state, "w_hh", "b_hh"])


def forward_outputs(mode: str, save: bool) -> list[str]:
    names = ["y", "h_n", "c_n"] if has_cell(mode) else ["y", "h_n"]
    return names + (["reserve"] if save and RESERVE[mode] else [])


def grad_inputs(mode: str) -> list[str]:
    """Names of the inputs of ``rnn_recurrence_grad``, in order."""
    names = ["y", "h0", "c0", "w_hh", "dy", "dh_n", "dc_n"] if has_cell(mode) else ["y", "h0", "w_hh", "dy", "dh_n"]
    return names + (["reserve"] if RESERVE[mode] else [])


def grad_outputs(mode: str) -> list[str]:
    return ["dxp", "dhp", "dh0", "dc0"] if has_cell(mode) else ["dxp", "dhp", "dh0"]


def named(layer_inputs: Sequence[Any], names: list[str], what: str) -> dict[str, Any]:
    if len(layer_inputs) != len(names):
        raise SolUnsupportedError(f"{what} takes {len(names)} inputs ({', '.join(names)}), got {len(layer_inputs)}")
    return dict(zip(names, layer_inputs, strict=True))


# -- shapes -----------------------------------------------------------------------------------------------------

def _hidden(w_hh: TensorType, mode: str, what: str) -> Any:
    hidden = w_hh.shape[-1]
    if w_hh.rank != 2 or w_hh.shape[0] != MODES[mode] * hidden:
        raise SolUnsupportedError(f"{what}: w_hh must be [{MODES[mode]}*H, H] for {mode}, got {list(w_hh.shape)}")
    return hidden


def _outputs(steps: Dim, batch: Dim, hidden: Any, dtype: str, mode: str, save: bool) -> list[TensorType]:
    h = Dim(hidden, Purpose.C)
    seq = TensorType((steps, batch, h), dtype)
    state = TensorType((batch, h), dtype)
    out = [seq, state, state] if has_cell(mode) else [seq, state]
    if save and RESERVE[mode]:
        out.append(TensorType((steps, batch, Dim(RESERVE[mode] * hidden, Purpose.C)), dtype))
    return out


def _infer(inputs: Sequence[TensorType], attrs: dict[str, Any], full: bool) -> list[TensorType]:
    mode = mode_of(attrs)
    what = "rnn" if full else "rnn_recurrence"
    ins = named(inputs, forward_inputs(mode, full), f"{what} ({mode})")
    x = ins["x" if full else "xp"]
    if x.rank != 3:
        raise SolUnsupportedError(f"{what}: the sequence must be time-major [T, N, features], got rank {x.rank}")
    hidden = _hidden(ins["w_hh"], mode, what)
    if not full and x.shape[-1] != MODES[mode] * hidden:
        raise SolUnsupportedError(f"{what}: the projected inputs need {MODES[mode]}*H features, got {x.shape[-1]}")
    if full and ins["w_ih"].shape[-1] != x.shape[-1]:
        raise SolUnsupportedError(f"{what}: w_ih has {ins['w_ih'].shape[-1]} input features, x {x.shape[-1]}")
    return _outputs(x.dims[0], x.dims[1], hidden, x.dtype, mode, bool(attrs.get("save", False)))


# -- numpy references (float64) -----------------------------------------------------------------------------------

def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _order(steps: int, reverse: bool) -> range:
    return range(steps - 1, -1, -1) if reverse else range(steps)


def recurrence(mode: str, xp: np.ndarray, h0: np.ndarray, c0: np.ndarray | None, w_hh: np.ndarray,
               b_hh: np.ndarray, reverse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """(y, h_n, c_n, reserve) in float64 from projected inputs."""
    steps, hidden = xp.shape[0], h0.shape[-1]
    y = np.empty((steps, *h0.shape))
    reserve = np.empty((steps, h0.shape[0], RESERVE[mode] * hidden))
    h, c = h0.astype(np.float64), None if c0 is None else c0.astype(np.float64)
    w, bias = w_hh.astype(np.float64), b_hh.astype(np.float64)
    for t in _order(steps, reverse):
        gx, gh = xp[t].astype(np.float64), h @ w.T + bias
        if mode == "lstm":
            g = gx + gh
            i, f, cand, o = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
            i, f, cand, o = _sigmoid(i), _sigmoid(f), np.tanh(cand), _sigmoid(o)
            c = f * c + i * cand
            h = o * np.tanh(c)
            reserve[t] = np.concatenate([i, f, cand, o, c], axis=-1)
        elif mode == "gru":
            r = _sigmoid(gx[:, :hidden] + gh[:, :hidden])
            z = _sigmoid(gx[:, hidden:2 * hidden] + gh[:, hidden:2 * hidden])
            hn = gh[:, 2 * hidden:]
            n = np.tanh(gx[:, 2 * hidden:] + r * hn)
            h = (1.0 - z) * n + z * h
            reserve[t] = np.concatenate([r, z, n, hn], axis=-1)
        else:
            pre = gx + gh
            h = np.tanh(pre) if mode == "rnn_tanh" else np.maximum(pre, 0.0)
        y[t] = h
    return y, h, c, reserve


def recurrence_grad(mode: str, y: np.ndarray, h0: np.ndarray, c0: np.ndarray | None, w_hh: np.ndarray,
                    dy: np.ndarray, dh_n: np.ndarray, dc_n: np.ndarray | None, reserve: np.ndarray | None,
                    reverse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(dxp, dhp, dh0, dc0) in float64: back-propagation through time."""
    steps, hidden = y.shape[0], y.shape[-1]
    gates = MODES[mode] * hidden
    dxp = np.empty((steps, y.shape[1], gates))
    dhp = np.empty_like(dxp)
    w = w_hh.astype(np.float64)
    dh = dh_n.astype(np.float64).copy()
    dc = None if dc_n is None else dc_n.astype(np.float64).copy()
    first = steps - 1 if reverse else 0
    for t in reversed(list(_order(steps, reverse))):
        prev_t = t + 1 if reverse else t - 1
        h_prev = h0 if t == first else y[prev_t]
        dh = dh + dy[t]
        direct = 0.0
        if mode == "lstm":
            res = reserve[t]  # type: ignore[index]
            i, f, cand, o, c = (res[:, k * hidden:(k + 1) * hidden] for k in range(5))
            c_prev = c0 if t == first else reserve[prev_t][:, 4 * hidden:]  # type: ignore[index]
            tc = np.tanh(c)
            dc = dc + dh * o * (1.0 - tc * tc)  # type: ignore[operator]
            parts = [dc * cand * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - cand * cand),
                     dh * tc * o * (1 - o)]
            dc = dc * f
            dxp[t] = dhp[t] = np.concatenate(parts, axis=-1)
        elif mode == "gru":
            res = reserve[t]  # type: ignore[index]
            r, z, n, hn = (res[:, k * hidden:(k + 1) * hidden] for k in range(4))
            dn = dh * (1.0 - z) * (1.0 - n * n)
            dr = dn * hn * r * (1.0 - r)
            dz = dh * (h_prev - n) * z * (1.0 - z)
            dxp[t] = np.concatenate([dr, dz, dn], axis=-1)
            dhp[t] = np.concatenate([dr, dz, dn * r], axis=-1)
            direct = dh * z
        else:
            h = y[t].astype(np.float64)
            dxp[t] = dhp[t] = dh * ((1.0 - h * h) if mode == "rnn_tanh" else (h > 0))
        dh = direct + dhp[t] @ w
    return dxp, dhp, dh, dc


def _cast(values: Sequence[np.ndarray | None], dtype: np.dtype) -> list[np.ndarray]:
    return [v.astype(dtype) for v in values if v is not None]


def _forward_reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any], full: bool) -> list[np.ndarray]:
    mode = mode_of(attrs)
    ins = named(inputs, forward_inputs(mode, full), "rnn")
    if full:
        xp = ins["x"].astype(np.float64) @ ins["w_ih"].astype(np.float64).T + ins["b_ih"].astype(np.float64)
    else:
        xp = ins["xp"].astype(np.float64)
    y, h, c, reserve = recurrence(mode, xp, ins["h0"], ins.get("c0"), ins["w_hh"], ins["b_hh"],
                                  bool(attrs.get("reverse", False)))
    dtype = inputs[0].dtype
    return _cast([y, h, c, reserve if saves_reserve(attrs) else None], dtype)


# -- gradient rule (shared by rnn and rnn_recurrence) ------------------------------------------------------------

def _previous_states(b: GradBuilder, y: Tensor, h0: Tensor, reverse: bool) -> Tensor:
    """h_{t-1} for every step t, [T, N, H]: h0 at the first step walked, else the neighbouring output."""
    steps = y.shape[0]
    first = b.one("reshape", [h0], {"shape": (1, *h0.shape)})
    if steps == 1:
        return first
    if reverse:
        rest = b.one("slice", [y], {"axis": 0, "start": 1, "stop": steps, "step": 1})
        return b.one("concat", [rest, first], {"axis": 0})
    rest = b.one("slice", [y], {"axis": 0, "start": 0, "stop": steps - 1, "step": 1})
    return b.one("concat", [first, rest], {"axis": 0})


def _row_sum(b: GradBuilder, g: Tensor) -> Tensor:
    return b.one("reduce_sum", [g], {"axes": (0, 1), "keepdims": False})


def rnn_gradient(layer: Layer, grads: list[Tensor | None], b: GradBuilder) -> list[Tensor | None]:
    mode = mode_of(layer.attrs)
    full = layer.op == "rnn"
    ins = named(layer.inputs, forward_inputs(mode, full), layer.name)
    outs = named(layer.outputs, forward_outputs(mode, bool(layer.attrs.get("save", False))), layer.name)
    incoming = dict(zip(forward_outputs(mode, bool(layer.attrs.get("save", False))), grads, strict=True))
    result: dict[str, Tensor | None] = {}
    if all(incoming.get(k) is None for k in ("y", "h_n", "c_n")):
        return [None] * len(layer.inputs)
    if RESERVE[mode] and "reserve" not in outs:
        raise SolUnsupportedError(f"layer {layer.name!r}: this {mode} was captured for inference (no saved gates); "
                                  "capture the model in training mode to train it")
    reverse = bool(layer.attrs.get("reverse", False))

    def given(name: str) -> Tensor:
        g = incoming.get(name)
        return g if g is not None else zeros_like(b, outs[name])

    values = {"y": b.fwd(outs["y"]), "h0": b.fwd(ins["h0"]), "w_hh": b.fwd(ins["w_hh"]),
              "dy": given("y"), "dh_n": given("h_n")}
    if has_cell(mode):
        values.update(c0=b.fwd(ins["c0"]), dc_n=given("c_n"))
    if RESERVE[mode]:
        values["reserve"] = b.fwd(outs["reserve"])
    back = dict(zip(grad_outputs(mode), b.layer("rnn_recurrence_grad", [values[k] for k in grad_inputs(mode)],
                                                 {"mode": mode, "reverse": reverse}), strict=True))
    dxp, dhp = back["dxp"], back["dhp"]
    result["h0"] = back["dh0"] if b.wants(ins["h0"]) else None
    if has_cell(mode):
        result["c0"] = back["dc0"] if b.wants(ins["c0"]) else None
    if b.wants(ins["w_hh"]):
        result["w_hh"] = b.one("linear_grad_weight", [_previous_states(b, values["y"], values["h0"], reverse), dhp])
    if b.wants(ins["b_hh"]):
        result["b_hh"] = _row_sum(b, dhp)
    if not full:
        result["xp"] = dxp
    else:
        if b.wants(ins["x"]):  # a library may run it as a linear's backward-data (see the linear rule)
            result["x"] = b.one("matmul", [dxp, b.fwd(ins["w_ih"])], {"linear_input_grad": True})
        if b.wants(ins["w_ih"]):
            result["w_ih"] = b.one("linear_grad_weight", [b.fwd(ins["x"]), dxp])
        if b.wants(ins["b_ih"]):
            result["b_ih"] = _row_sum(b, dxp)
    return [result.get(name) for name in forward_inputs(mode, full)]


# -- the ops ----------------------------------------------------------------------------------------------------

@op("rnn")
class Rnn:
    """One recurrent layer in one direction: inputs (x[T,N,I], h0[N,H], [c0], w_ih[G*H,I], w_hh[G*H,H], b_ih, b_hh)
    -> (y[T,N,H], h_n[N,H], [c_n], [reserve]); attrs mode, reverse, save (see the module docstring)."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return _infer(inputs, attrs, full=True)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return _forward_reference(inputs, attrs, full=True)

    gradient = staticmethod(rnn_gradient)


@op("rnn_recurrence")
class RnnRecurrence:
    """The time loop of `Rnn` over projected inputs: (xp[T,N,G*H], h0, [c0], w_hh, b_hh) -> as `Rnn`."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return _infer(inputs, attrs, full=False)

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        return _forward_reference(inputs, attrs, full=False)

    gradient = staticmethod(rnn_gradient)


@op("rnn_recurrence_grad")
class RnnRecurrenceGrad:
    """Back-propagation through time: (y, h0, [c0], w_hh, dy, dh_n, [dc_n], [reserve]) -> (dxp[T,N,G*H], dhp[T,N,G*H],
    dh0, [dc0]): the gradients of the projected inputs and of the recurrent pre-activations ``h @ w_hh^T + b_hh``
    (they differ for GRU only, where r multiplies the recurrent part of n)."""

    @staticmethod
    def infer(inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        mode = mode_of(attrs)
        ins = named(inputs, grad_inputs(mode), f"rnn_recurrence_grad ({mode})")
        y, h0 = ins["y"], ins["h0"]
        hidden = _hidden(ins["w_hh"], mode, "rnn_recurrence_grad")
        gates = TensorType((y.dims[0], y.dims[1], Dim(MODES[mode] * hidden, Purpose.C)), y.dtype)
        state = TensorType(h0.dims, h0.dtype)
        return [gates, gates, state, state] if has_cell(mode) else [gates, gates, state]

    @staticmethod
    def reference(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        mode = mode_of(attrs)
        ins = named(inputs, grad_inputs(mode), "rnn_recurrence_grad")
        out = recurrence_grad(mode, ins["y"], ins["h0"], ins.get("c0"), ins["w_hh"], ins["dy"], ins["dh_n"],
                              ins.get("dc_n"), ins.get("reserve"), bool(attrs.get("reverse", False)))
        return _cast(out, inputs[0].dtype)
