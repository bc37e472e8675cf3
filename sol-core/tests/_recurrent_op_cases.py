"""Codegen cases of the recurrent ops (rnn, rnn_recurrence, rnn_recurrence_grad) for every mode: one build."""

from __future__ import annotations

import numpy as np
from _codegen_helpers import CaseGraph
from sol.ir import Dim, Purpose
from sol.ir.ops.recurrent import MODES, RESERVE, has_cell

RNG = np.random.default_rng(11)
T, N, F, H = 5, 2, 3, 4


def _fixed_input(cg: CaseGraph, name: str, shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """An input of fixed shape (time-major sequences have no batch-first dim for CaseGraph.input)."""
    t = cg.graph.add_input(name, [Dim(s, Purpose.C) for s in shape], "float32")
    cg.feeds.append(lambda batch, rng: (rng.standard_normal(shape) * 0.5).astype(np.float32))
    return t


def _weights(cg: CaseGraph, mode: str) -> dict[str, object]:
    gates = MODES[mode] * H
    scale = 1 / np.sqrt(H)
    return {name: cg.param(f"{mode}.{name}", (RNG.uniform(-scale, scale, shape)).astype(np.float32))
            for name, shape in (("w_ih", (gates, F)), ("w_hh", (gates, H)), ("b_ih", (gates,)), ("b_hh", (gates,)))}


def recurrent_graph() -> CaseGraph:
    cg = CaseGraph("recurrent")
    x = _fixed_input(cg, "x", (T, N, F))
    h0 = _fixed_input(cg, "h0", (N, H))
    c0 = _fixed_input(cg, "c0", (N, H))
    for mode in MODES:
        w = _weights(cg, mode)
        state = [h0, c0] if has_cell(mode) else [h0]
        cg.case(f"rnn_{mode}", "rnn", [x, *state, w["w_ih"], w["w_hh"], w["b_ih"], w["b_hh"]],
                {"mode": mode, "reverse": mode == "gru", "save": False})
        xp = _fixed_input(cg, f"xp_{mode}", (T, N, MODES[mode] * H))
        outs = cg.case(f"rnn_recurrence_{mode}", "rnn_recurrence", [xp, *state, w["w_hh"], w["b_hh"]],
                       {"mode": mode, "reverse": mode == "lstm", "save": True})
        dy = _fixed_input(cg, f"dy_{mode}", (T, N, H))
        dh = _fixed_input(cg, f"dh_{mode}", (N, H))
        grads = [dy, dh] + ([_fixed_input(cg, f"dc_{mode}", (N, H))] if has_cell(mode) else [])
        reserve = [outs[-1]] if RESERVE[mode] else []
        cg.case(f"rnn_recurrence_grad_{mode}", "rnn_recurrence_grad", [outs[0], *state, w["w_hh"], *grads, *reserve],
                {"mode": mode, "reverse": mode == "lstm"})
    return cg
