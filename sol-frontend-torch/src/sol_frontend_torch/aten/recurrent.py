"""nn.LSTM / nn.GRU / nn.RNN: aten.lstm, aten.gru, aten.rnn_tanh, aten.rnn_relu.

torch.export keeps these as one op per module (not decomposed). Each
(layer, direction) becomes one SOL ``rnn`` layer (time-major, see
`sol.ir.ops.recurrent`); layers are chained, the two directions of a
bidirectional layer concatenated on the feature dim, batch-first sequences
permuted to time-major and back, and the final states stacked into
PyTorch's ``[layers * directions, N, H]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sol.errors import SolUnsupportedError
from sol.ir import Tensor
from sol.ir.ops.recurrent import MODES

from ._registry import Context, aten


def _state(cx: Context, stacked: Tensor, k: int) -> Tensor:
    """Entry ``k`` of a ``[layers * directions, N, H]`` state as ``[N, H]``."""
    piece = cx.one("slice", [stacked], {"axis": 0, "start": k, "stop": k + 1, "step": 1})
    return cx.one("reshape", [piece], {"shape": tuple(stacked.shape[1:])})


def _stacked(cx: Context, states: Sequence[Tensor]) -> Tensor:
    """``[N, H]`` states as one ``[len(states), N, H]``."""
    rows = [cx.one("reshape", [s], {"shape": (1, *s.shape)}) for s in states]
    return rows[0] if len(rows) == 1 else cx.one("concat", rows, {"axis": 0})


def _zero_bias(cx: Context, weight: Tensor, name: str) -> Tensor:
    return cx.graph.add_const(name, np.zeros(int(weight.shape[0]), dtype=np.dtype(weight.dtype)))


def _recurrent(cx: Context, mode: str, x: Tensor, states: Sequence[Tensor], params: Sequence[Tensor], has_biases: bool,
               num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, ...]:
    if not isinstance(params, (list, tuple)) or not all(isinstance(p, Tensor) for p in params):
        raise SolUnsupportedError("packed sequences (nn.utils.rnn.pack_padded_sequence) are not supported; pass a "
                                  "padded tensor")
    directions = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if len(params) != num_layers * directions * per:
        raise SolUnsupportedError("an LSTM with proj_size is not supported yet; use proj_size=0 and a Linear after it")
    if dropout > 0 and train and not cx.training:
        raise SolUnsupportedError("dropout between recurrent layers in training mode while capturing for inference; "
                                  "call model.eval() for inference")
    if x.rank not in (2, 3):
        raise SolUnsupportedError(f"the input of a recurrent layer must be 2-d (unbatched) or 3-d, got rank {x.rank}")
    unbatched = x.rank == 2
    if unbatched:  # [T, I] -> [T, 1, I]; states [L*D, H] -> [L*D, 1, H]
        x = cx.one("reshape", [x], {"shape": (x.shape[0], 1, x.shape[1])})
        states = [cx.one("reshape", [s], {"shape": (s.shape[0], 1, s.shape[1])}) for s in states]
    elif batch_first:
        x = cx.one("permute", [x], {"perm": (1, 0, 2)})
    cell = mode == "lstm"
    finals: list[list[Tensor]] = [[], []]
    sequence = x
    for layer in range(num_layers):
        if layer > 0 and dropout > 0 and train:  # PyTorch drops the inputs of every layer but the first
            sequence = cx.one("dropout_train", [sequence, cx.rng_key()], {"p": float(dropout), "stream": cx.rng_stream()})
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            weights = list(params[k * per:(k + 1) * per])
            if not has_biases:
                weights += [_zero_bias(cx, weights[0], f"{cx.where}_b_ih{k}"), _zero_bias(cx, weights[1], f"{cx.where}_b_hh{k}")]
            initial = [_state(cx, s, k) for s in states]
            inputs = [sequence, *initial, *weights]
            result = cx.layer("rnn", inputs, {"mode": mode, "reverse": direction == 1, "save": bool(cx.training)})
            outputs.append(result[0])
            finals[0].append(result[1])
            if cell:
                finals[1].append(result[2])
        sequence = outputs[0] if directions == 1 else cx.one("concat", outputs, {"axis": 2})
    if unbatched:
        sequence = cx.one("reshape", [sequence], {"shape": (sequence.shape[0], sequence.shape[2])})
    elif batch_first:
        sequence = cx.one("permute", [sequence], {"perm": (1, 0, 2)})
    out = [sequence]
    for final in finals[: 2 if cell else 1]:
        stacked = _stacked(cx, final)
        if unbatched:
            stacked = cx.one("reshape", [stacked], {"shape": (stacked.shape[0], stacked.shape[2])})
        out.append(stacked)
    return tuple(out)


def _check_states(mode: str, hx: Any) -> list[Tensor]:
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    if len(states) != (2 if mode == "lstm" else 1) or not all(isinstance(s, Tensor) for s in states):
        raise SolUnsupportedError(f"{mode}: unexpected initial states {hx!r}")
    return states


@aten("lstm")
def lstm(cx: Context, x: Tensor, hx: Any, params: Any, has_biases: bool = True, num_layers: int = 1,
         dropout: float = 0.0, train: bool = False, bidirectional: bool = False, batch_first: bool = False,
         *rest: Any) -> tuple[Tensor, ...]:
    if not isinstance(hx, (list, tuple)):  # lstm.data(data, batch_sizes, hx, params, ...)
        raise SolUnsupportedError("packed sequences (nn.utils.rnn.pack_padded_sequence) are not supported; pass a "
                                  "padded tensor")
    return _recurrent(cx, "lstm", x, _check_states("lstm", hx), params, has_biases, num_layers, dropout, train,
                      bidirectional, batch_first)


def _single_state(mode: str):  # type: ignore[no-untyped-def]
    def handler(cx: Context, x: Tensor, hx: Any, params: Any, has_biases: bool = True, num_layers: int = 1,
                dropout: float = 0.0, train: bool = False, bidirectional: bool = False, batch_first: bool = False,
                *rest: Any) -> tuple[Tensor, ...]:
        if not isinstance(params, (list, tuple)):  # gru.data(data, batch_sizes, hx, params, ...)
            raise SolUnsupportedError("packed sequences (nn.utils.rnn.pack_padded_sequence) are not supported; pass "
                                      "a padded tensor")
        return _recurrent(cx, mode, x, _check_states(mode, hx), params, has_biases, num_layers, dropout, train,
                          bidirectional, batch_first)

    handler.__name__ = mode
    return handler


for _mode in MODES:
    if _mode != "lstm":
        aten(_mode)(_single_state(_mode))
