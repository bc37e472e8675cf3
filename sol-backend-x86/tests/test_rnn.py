"""Recurrent layers as oneDNN's RNN primitives (inference), against the numpy reference and SOL's own loop.

Each mode (LSTM, linear-before-reset GRU, vanilla RNN tanh/relu) in one direction (the other in the slow set), with a wildcard batch
called at batches 1 and 3: the glue packs PyTorch's weights into oneDNN's layout and gate order (the GRU's
update/reset swapped, its recurrent output-gate bias kept apart), so a wrong gate or bias shows here.
Outputs nobody reads (only the final state is an output, or only the sequence) get the glue's scratch.
"""

from __future__ import annotations

import numpy as np
import pytest
import sol
from sol.compiler import compile_graph
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference
from sol.ir.ops.recurrent import MODES, forward_inputs
from sol_backend_x86.flavour import onednn_paths
from sol_backend_x86.rnn import ONEDNN_RNN_KEY

pytestmark = [pytest.mark.skipif(onednn_paths() is None, reason="oneDNN (onednn-devel-cpu-gomp) is not installed")]

STEPS, FEATURES, HIDDEN = 4, 5, 7
RTOL, ATOL = 1e-4, 1e-5


def _graph(mode: str, reverse: bool, outputs: str, save: bool = False) -> Graph:
    rng = np.random.default_rng(len(mode) + reverse)
    gates = MODES[mode] * HIDDEN
    g = Graph(f"rnn_{mode}")
    x = g.add_input("x", [Dim(STEPS, Purpose.S), Dim(BATCH, Purpose.N), Dim(FEATURES, Purpose.C)])
    states = [g.add_input(name, [Dim(BATCH, Purpose.N), Dim(HIDDEN, Purpose.C)])
              for name in (["h0", "c0"] if mode == "lstm" else ["h0"])]
    shapes = {"w_ih": (gates, FEATURES), "w_hh": (gates, HIDDEN), "b_ih": (gates,), "b_hh": (gates,)}
    params = {name: g.add_param(name, (rng.standard_normal(shape) * 0.4).astype(np.float32))
              for name, shape in shapes.items()}
    inputs = [x, *states, *[params[name] for name in forward_inputs(mode, full=True)[len(states) + 1:]]]
    outs = g.add_layer("rnn", inputs, {"mode": mode, "reverse": reverse, "save": save}, name="encoder")
    g.outputs = {"all": outs[: 3 if mode == "lstm" else 2], "sequence": outs[:1], "final": outs[1:2]}[outputs]
    return g


def _feeds(g: Graph, batch: int) -> list[np.ndarray]:
    rng = np.random.default_rng(batch)
    return [rng.standard_normal([batch if not isinstance(s, int) else s for s in t.shape]).astype(np.float32)
            for t in g.inputs]


def _library_ops(compiled) -> list[str]:  # type: ignore[no-untyped-def]
    return [t for t in compiled.metadata["clusters"] if t.startswith("DNN ")]


def _check(g: Graph, compiled) -> None:  # type: ignore[no-untyped-def]
    params = {name: t.data for name, t in g.params.items()}
    for batch in (1, 3):
        feeds = _feeds(g, batch)
        for got, want in zip(compiled.run_numpy(feeds, params), run_reference(g, feeds, params), strict=True):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"batch {batch}")


@pytest.mark.parametrize(("mode", "reverse"), [("lstm", False), ("gru", True), ("rnn_tanh", True), ("rnn_relu", False),
                                             *[pytest.param(m, r, marks=pytest.mark.slow) for m, r in
                                               (("lstm", True), ("gru", False), ("rnn_tanh", False), ("rnn_relu", True))]])
def test_rnn_runs_as_one_onednn_primitive(mode: str, reverse: bool) -> None:
    g = _graph(mode, reverse, "all")
    compiled = compile_graph(g, "x86", passes=False)
    assert any("(rnn)" in t for t in _library_ops(compiled)), compiled.metadata["clusters"]
    _check(g, compiled)


@pytest.mark.parametrize("outputs", ["sequence", "final"])
def test_outputs_nobody_reads(outputs: str) -> None:
    g = _graph("lstm", False, outputs)
    compiled = compile_graph(g, "x86", passes=False)
    assert any("(rnn)" in t for t in _library_ops(compiled))
    _check(g, compiled)


def test_training_capture_and_the_switch_keep_sols_loop() -> None:
    """A layer that saves its gates for a backward (and any layer with x86::onednn_rnn off) runs SOL's time loop,
    with oneDNN only for the input projection."""
    g = _graph("gru", True, "all", save=True)
    compiled = compile_graph(g, "x86", passes=False)
    titles = _library_ops(compiled)
    assert titles and not any("(rnn)" in t for t in titles) and any("input_projection" in t for t in titles), titles
    assert any("rnn_recurrence" in t for t in compiled.metadata["clusters"])
    _check(g, compiled)
    previous = sol.config[ONEDNN_RNN_KEY.name]
    sol.config[ONEDNN_RNN_KEY.name] = False
    try:
        g = _graph("lstm", False, "all")
        compiled = compile_graph(g, "x86", passes=False)
        assert not any("(rnn)" in t for t in _library_ops(compiled))
        _check(g, compiled)
    finally:
        sol.config[ONEDNN_RNN_KEY.name] = previous
