"""The recurrent ops' numpy references and gradient rules (LSTM, GRU, RNN tanh/relu).

The references are checked against a cell-by-cell formulation written the way
PyTorch documents its layers (one gate at a time, separate input and hidden
products), the gradient rules against central differences in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
from sol.errors import SolUnsupportedError
from sol.ir import Graph
from sol.ir.ops.recurrent import MODES, RESERVE, forward_inputs, forward_outputs

from ._autodiff_helpers import check_gradients

T, N, FEATURES, H = 3, 2, 4, 5


def _sig(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def _documented(mode: str, x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse: bool):  # type: ignore[no-untyped-def]
    """PyTorch's documented equations, one gate per product."""
    def gate(k: int, v: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        return v @ w[k * H:(k + 1) * H].T + b[k * H:(k + 1) * H]

    h, c, ys = h0, c0, [None] * T
    for t in (reversed(range(T)) if reverse else range(T)):
        xt = x[t]
        if mode == "lstm":
            i = _sig(gate(0, xt, w_ih, b_ih) + gate(0, h, w_hh, b_hh))
            f = _sig(gate(1, xt, w_ih, b_ih) + gate(1, h, w_hh, b_hh))
            g = np.tanh(gate(2, xt, w_ih, b_ih) + gate(2, h, w_hh, b_hh))
            o = _sig(gate(3, xt, w_ih, b_ih) + gate(3, h, w_hh, b_hh))
            c = f * c + i * g
            h = o * np.tanh(c)
        elif mode == "gru":
            r = _sig(gate(0, xt, w_ih, b_ih) + gate(0, h, w_hh, b_hh))
            z = _sig(gate(1, xt, w_ih, b_ih) + gate(1, h, w_hh, b_hh))
            n = np.tanh(gate(2, xt, w_ih, b_ih) + r * gate(2, h, w_hh, b_hh))
            h = (1 - z) * n + z * h
        else:
            pre = gate(0, xt, w_ih, b_ih) + gate(0, h, w_hh, b_hh)
            h = np.tanh(pre) if mode == "rnn_tanh" else np.maximum(pre, 0)
        ys[t] = h
    return [np.stack(ys), h] + ([c] if mode == "lstm" else [])


def _values(mode: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    g = MODES[mode] * H
    return {"x": rng.standard_normal((T, N, FEATURES)), "h0": rng.standard_normal((N, H)) * 0.5,
            "c0": rng.standard_normal((N, H)) * 0.5, "w_ih": rng.standard_normal((g, FEATURES)) * 0.4,
            "w_hh": rng.standard_normal((g, H)) * 0.4, "b_ih": rng.standard_normal(g) * 0.2,
            "b_hh": rng.standard_normal(g) * 0.2}


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("mode", list(MODES))
def test_reference_matches_the_documented_equations(mode: str, reverse: bool) -> None:
    from sol.ir import get_op

    v = _values(mode, np.random.default_rng(1))
    ins = [v[k] for k in forward_inputs(mode, full=True)]
    for save in (False, True):
        outs = get_op("rnn").reference(ins, {"mode": mode, "reverse": reverse, "save": save})
        assert len(outs) == len(forward_outputs(mode, save))
        want = _documented(mode, v["x"], v["h0"], v["c0"], v["w_ih"], v["w_hh"], v["b_ih"], v["b_hh"], reverse)
        for got, expected in zip(outs, want, strict=False):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        if save and RESERVE[mode]:
            assert outs[-1].shape == (T, N, RESERVE[mode] * H)
    # the recurrence over projected inputs is the same layer
    xp = v["x"] @ v["w_ih"].T + v["b_ih"]
    rec = get_op("rnn_recurrence").reference([xp, *[v[k] for k in forward_inputs(mode, full=False)[1:]]],
                                             {"mode": mode, "reverse": reverse})
    for got, expected in zip(rec, want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def _build(mode: str, reverse: bool, full: bool, relu_shift: bool = False):  # type: ignore[no-untyped-def]
    names = forward_inputs(mode, full)

    def build(g: Graph, params, inputs):  # type: ignore[no-untyped-def]
        outs = g.add_layer("rnn" if full else "rnn_recurrence", params, {"mode": mode, "reverse": reverse, "save": True})
        return outs[:3] if mode == "lstm" else outs[:2]

    return build, names


@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("mode", list(MODES))
def test_gradients_match_central_differences(mode: str, reverse: bool, full: bool) -> None:
    rng = np.random.default_rng(2)
    v = _values(mode, rng)
    if mode == "rnn_relu":  # keep pre-activations away from the kink, where differences are not derivatives
        v["b_ih"] = v["b_ih"] + 0.05 * np.sign(v["b_ih"])
    if not full:
        v["xp"] = v["x"] @ v["w_ih"].T + v["b_ih"]
    build, names = _build(mode, reverse, full)
    check_gradients(build, [v[k] for k in names], tol=1e-6)


def test_inference_capture_cannot_train() -> None:
    from sol.autodiff import derive

    v = _values("lstm", np.random.default_rng(3))
    g = Graph("m")
    params = [g.add_param(k, v[k]) for k in forward_inputs("lstm", True)]
    g.outputs = g.add_layer("rnn", params, {"mode": "lstm", "reverse": False, "save": False}, name="encoder.lstm")[:1]
    with pytest.raises(SolUnsupportedError, match="encoder.lstm.*training mode"):
        derive(g, {"w_hh"})


def test_bad_weights_name_the_shape() -> None:
    v = _values("gru", np.random.default_rng(4))
    g = Graph("m")
    params = [g.add_param(k, v[k]) for k in forward_inputs("gru", True)]
    params[3] = g.add_param("w_hh_bad", v["w_hh"][:5])
    with pytest.raises(SolUnsupportedError, match=r"w_hh must be \[3\*H, H\]"):
        g.add_layer("rnn", params, {"mode": "gru"})
