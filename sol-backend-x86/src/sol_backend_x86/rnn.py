"""Recurrent layers (LSTM, GRU, vanilla RNN) as oneDNN's RNN primitives (inference).

oneDNN runs a whole layer in one call: the input projection of all time steps
as one GEMM, then per step the recurrent GEMM of all gates and its fused cell
kernel (lstm_forward, lbr_gru_forward: linear-before-reset, which is
PyTorch's GRU, and vanilla_rnn_forward). SOL's generated time loop
(`sol.codegen.kernels.recurrent`) does the same with a oneDNN linear for the
projection; the primitive saves the per-step fork/join of the generated loop
and runs the step GEMMs with oneDNN's JIT kernels.

Training keeps SOL's own loop: the backward needs the gates the forward saw
(SOL's reserve), which oneDNN keeps in its own workspace format. So only
layers captured for inference (``save`` off) run here. The weights are
packed once per prepare into oneDNN's layout and gate order
(``glue/sol_dnnl_rnn.cpp``); a wildcard batch gets one primitive per batch.
``x86::onednn_rnn`` turns the primitives off (the generated loop then runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import sol
from sol.codegen import cexpr
from sol.codegen.dnn import DnnCall, DnnCode
from sol.ir import Layer, Tensor
from sol.ir.ops.recurrent import forward_inputs, forward_outputs, has_cell, mode_of, named
from sol.records import ConfigKey

if TYPE_CHECKING:
    from sol.codegen.kernels import KernelContext

ONEDNN_RNN_KEY = ConfigKey("x86::onednn_rnn", bool, True,
                           "Run LSTM/GRU/RNN layers (inference) as oneDNN's RNN primitives; off: SOL's generated "
                           "time loop with a oneDNN GEMM for the input projection.")

#: SOL's mode -> the glue's (sol_dnnl_rnn.h)
MODES = {"lstm": "SOL_RNN_LSTM", "gru": "SOL_RNN_GRU", "rnn_tanh": "SOL_RNN_TANH", "rnn_relu": "SOL_RNN_RELU"}
#: the weights and biases, packed once per prepare
WEIGHTS = ("w_ih", "w_hh", "b_ih", "b_hh")


def accepts(layer: Layer) -> bool:
    """An inference ``rnn`` in float32 with static steps and features (the batch may be the wildcard)."""
    if layer.op != "rnn" or layer.attrs.get("save") or not sol.config.get(ONEDNN_RNN_KEY.name, True):
        return False
    if any(t.dtype != "float32" for t in [*layer.inputs, *layer.outputs]):
        return False
    x = layer.inputs[0]
    if layer.attrs.get("mode") not in MODES or not all(isinstance(s, int) for s in (x.shape[0], x.shape[2])):
        return False
    # the weights are packed once per prepare: they must be the model's own (the planner keeps an accepted layer
    # whole, and SOL's loop only runs split layers)
    return all(layer.inputs[i].kind in ("param", "const") for i in static_inputs(layer))


def static_inputs(layer: Layer) -> Sequence[int]:
    names = forward_inputs(mode_of(layer.attrs), full=True)
    return tuple(names.index(name) for name in WEIGHTS)


def _pointer(kc: KernelContext, t: Tensor) -> str:
    """The tensor's pointer, or NULL when nothing reads it (it was never given memory)."""
    try:
        return kc.ptr(t)
    except AssertionError:
        return "nullptr"


def render(call: DnnCall, forward: KernelContext, prepare: KernelContext) -> DnnCode:
    layer, sym = call.anchor, call.symbol
    mode = mode_of(layer.attrs)
    ins = named(layer.inputs, forward_inputs(mode, full=True), layer.name)
    outs = named(layer.outputs, forward_outputs(mode, save=False), layer.name)
    x = ins["x"]
    steps, features, hidden = (cexpr.static(s, f"{what} of {layer.name!r}") for s, what in
                               ((x.shape[0], "steps"), (x.shape[2], "input features"), (ins["w_hh"].shape[1], "hidden")))
    batch = cexpr.size(x.shape[1])
    created = str(x.shape[1]) if isinstance(x.shape[1], int) else "1"  # init has no batch: a wildcard's is created at 1
    code = DnnCode()
    code.globals += [
        '#include "sol_dnnl_rnn.h"',
        f"static void* {sym} = nullptr;",
        f"static int64_t {sym}_packed = 0;",
    ]
    code.init += [
        f"{{ sol_rnn_desc d = {{{MODES[mode]}, {int(bool(layer.attrs.get('reverse')))}, {steps}, {features}, "
        f"{hidden}}};  // {layer.name}: {mode}",
        f"  {sym} = sol_rnn_create(&d, {created}); }}",
        f'if (!{sym}) {{ fprintf(stderr, "SOL: oneDNN rejected layer %s: %s\\n", "{layer.name}", '
        f"sol_rnn_last_error()); return 1; }}",
        f"{sym}_packed = sol_derived_reserve(sol_rnn_packed_bytes({sym}));",
    ]
    weights = ", ".join(prepare.ptr(ins[name]) for name in WEIGHTS)
    code.prepare.append(f"if (sol_rnn_pack({sym}, {weights}, derived + {sym}_packed) != 0) return SOL_STATUS_LIBRARY;"
                        f"  // {layer.name}: weights into oneDNN's layout and gate order")
    cell = has_cell(mode)
    code.forward += [
        f"if (sol_rnn_execute({sym}, {batch}, {forward.ptr(x)}, {forward.ptr(ins['h0'])}, "
        f"{forward.ptr(ins['c0']) if cell else 'nullptr'}, derived + {sym}_packed, {_pointer(forward, outs['y'])}, "
        f"{_pointer(forward, outs['h_n'])}, {_pointer(forward, outs['c_n']) if cell else 'nullptr'}) != 0) "
        f"return SOL_STATUS_LIBRARY;  // {layer.name} ({mode})",
    ]
    return code


def settings() -> str:
    """What decides which layers run here besides the layer (for cache keys of generated code)."""
    return f"onednn_rnn {int(sol.config.get(ONEDNN_RNN_KEY.name, True))}"
