"""The time loops of recurrent layers (`sol.ir.ops.recurrent`): forward and back-propagation through time.

The input projection of all time steps is a separate ``linear`` (one GEMM,
a library call where there is one, see `sol.codegen.lowering`); what stays
here is inherently sequential: per time step

1. one GEMM of the state with the recurrent weights of *all* gates at once
   (``[N, H] x [H, G*H]``; the weights transposed once per call so the inner
   loop runs unit-stride over the gates), parallel over (sample, block of
   gate columns), accumulating a block in a stack buffer;
2. the cell's elementwise math, parallel over the samples, SIMD over the
   hidden units, emitting the output sequence (so activations after the layer
   fuse into it) and, when training, the reserve the backward reads.

The state lives in heap scratch of the kernel, not in the output: whatever
follows the layer may be fused into the output's stores, so the output may
never be materialised. The backward walks the steps the other way with the
transposed structure: cell gradients first, then one GEMM of the gate
gradients with ``w_hh`` for the state gradient of the previous step.
"""

from __future__ import annotations

from ...ir import Layer, Tensor
from ...ir.ops.recurrent import (
    MODES,
    forward_inputs,
    forward_outputs,
    grad_inputs,
    grad_outputs,
    has_cell,
    mode_of,
    named,
    saves_reserve,
)
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt
from .base import KernelContext, ctype_of, kernel

#: the multiply-adds of one step's GEMM below which a step runs on one thread: every parallel loop inside the time
#: loop is a fork/join per step (microseconds on idle cores, milliseconds when the machine is oversubscribed: a
#: 2-layer bidirectional LSTM with 6 hidden units took 360 ms per call with two threads at load 10, 0.05 ms on one)
PARALLEL_STEP_WORK = 32768
#: gate columns (forward) or hidden units (backward) per parallel task of a step's GEMM: 64 floats (4 cache lines)
#: in a stack accumulator
COLUMNS = 64


def _sizes(layer: Layer, sequence: Tensor, hidden_of: Tensor) -> tuple[str, str, int]:
    steps = cexpr.size(sequence.shape[0])
    batch = cexpr.size(sequence.shape[1])
    hidden = cexpr.static(hidden_of.shape[-1], f"hidden size of {layer.name!r}")
    return steps, batch, hidden


def threads_pay_off(sequence: Tensor, hidden: int, gates: int) -> bool:
    """Whether a step's work (``N * H * G*H`` multiply-adds) is worth a fork/join; a wildcard batch counts as 1."""
    batch = sequence.shape[1] if isinstance(sequence.shape[1], int) else 1
    return batch * hidden * gates >= PARALLEL_STEP_WORK


def _blocked_gemm(t: str, rows: str, width: int, depth: int, init: str, left: str, right: str, store: str,
                  parallel: bool) -> Loop:
    """``store`` of ``init + sum_k left * right`` per (row ``n``, column ``col``), columns in blocks of `COLUMNS`.

    ``left`` is a C expression in ``n`` and ``k`` (the reduced index); ``init``, ``right`` and ``store`` are
    templates whose ``{col}`` is the column; ``store`` assigns ``acc[c]``. Inner loop: SIMD over the block's
    columns, one broadcast of ``left`` per ``k``.
    """
    blocks = (width + COLUMNS - 1) // COLUMNS
    col = f"(cb * {COLUMNS} + c)"
    task: list[Node] = [
        Stmt(f"const int64_t width = {width} - cb * {COLUMNS} < {COLUMNS} ? {width} - cb * {COLUMNS} : {COLUMNS};"),
        Stmt(f"alignas(64) {t} acc[{COLUMNS}];"),
        Loop("c", "width", [Stmt(f"acc[c] = {init.format(col=col)};")], vector=True),
        Loop("k", str(depth), [
            Stmt(f"const {t} a = {left};"),
            Loop("c", "width", [Stmt(f"acc[c] += a * {right.format(col=col)};")], vector=True),
        ]),
        Loop("c", "width", [Stmt(store.format(col=col))], vector=True),
    ]
    return Loop("n", rows, [Loop("cb", str(blocks), [Block(task)], parallel=parallel)], parallel=parallel)


def _sigmoid(kc: KernelContext, t: str, v: str) -> str:
    return f"(({t})1 / (({t})1 + {kc.math('exp')}(-({v}))))"


@kernel("rnn_recurrence")
def rnn_recurrence(layer: Layer, kc: KernelContext) -> list[Node]:
    mode = mode_of(layer.attrs)
    ins = named(layer.inputs, forward_inputs(mode, full=False), layer.name)
    outs = forward_outputs(mode, saves_reserve(layer.attrs))
    position = {name: k for k, name in enumerate(outs)}
    xp, y = ins["xp"], layer.outputs[0]
    t = ctype_of(y, layer)
    steps, batch, hidden = _sizes(layer, xp, y)
    gates = MODES[mode] * hidden
    reverse = bool(layer.attrs.get("reverse", False))
    save = "reserve" in position
    threads = threads_pay_off(xp, hidden, gates)
    tanh = kc.math("tanh")

    def x(k: int) -> str:  # the projected input of gate k at (ts, n, j)
        return kc.load(xp, ["ts", "n", f"({k * hidden} + j)"])

    def g(k: int) -> str:  # the recurrent product of gate k (b_hh included)
        return f"sol_g[n * {gates} + {k * hidden} + j]"

    def reserve(k: int, value: str) -> list[Node]:
        return [Emit(value, ("ts", "n", f"({k * hidden} + j)"), position["reserve"])] if save else []

    state = f"sol_h[n * {hidden} + j]"
    cell_state = f"sol_c[n * {hidden} + j]"
    if mode == "lstm":
        cell: list[Node] = [
            Stmt(f"const {t} i = {_sigmoid(kc, t, f'{x(0)} + {g(0)}')};"),
            Stmt(f"const {t} f = {_sigmoid(kc, t, f'{x(1)} + {g(1)}')};"),
            Stmt(f"const {t} cand = {tanh}({x(2)} + {g(2)});"),
            Stmt(f"const {t} o = {_sigmoid(kc, t, f'{x(3)} + {g(3)}')};"),
            Stmt(f"const {t} c = f * {cell_state} + i * cand;"),
            Stmt(f"const {t} h = o * {tanh}(c);"),
            Stmt(f"{cell_state} = c;"),
            *reserve(0, "i"), *reserve(1, "f"), *reserve(2, "cand"), *reserve(3, "o"), *reserve(4, "c"),
        ]
    elif mode == "gru":
        cell = [
            Stmt(f"const {t} r = {_sigmoid(kc, t, f'{x(0)} + {g(0)}')};"),
            Stmt(f"const {t} z = {_sigmoid(kc, t, f'{x(1)} + {g(1)}')};"),
            Stmt(f"const {t} hn = {g(2)};"),
            Stmt(f"const {t} nv = {tanh}({x(2)} + r * hn);"),
            Stmt(f"const {t} h = (({t})1 - z) * nv + z * {state};"),
            *reserve(0, "r"), *reserve(1, "z"), *reserve(2, "nv"), *reserve(3, "hn"),
        ]
    else:
        act = f"{tanh}(pre)" if mode == "rnn_tanh" else f"(pre > ({t})0 ? pre : ({t})0)"
        cell = [Stmt(f"const {t} pre = {x(0)} + {g(0)};"), Stmt(f"const {t} h = {act};")]
    cell += [Stmt(f"{state} = h;"), Emit("h", ("ts", "n", "j"), 0)]

    w_hh, b_hh = kc.ptr(ins["w_hh"]), kc.ptr(ins["b_hh"])
    states = [("sol_h", ins["h0"])] + ([("sol_c", ins["c0"])] if has_cell(mode) else [])
    nodes: list[Node] = [
        Stmt(f"{t}* sol_h = new {t}[{batch} * {hidden}];"),
        *([Stmt(f"{t}* sol_c = new {t}[{batch} * {hidden}];")] if has_cell(mode) else []),
        Stmt(f"{t}* sol_g = new {t}[{batch} * {gates}];"),
        # w_hh [G*H, H] transposed to [H, G*H]: the step's GEMM then streams whole rows of gate columns
        Stmt(f"{t}* sol_wt = new {t}[{hidden * gates}];"),
        Loop("k", str(hidden), [Loop("col", str(gates), [Stmt(f"sol_wt[k * {gates} + col] = {w_hh}[col * {hidden} + k];")],
                                     vector=True)], parallel=True),
        Loop("n", batch, [Loop("j", str(hidden), [Stmt(f"{name}[n * {hidden} + j] = {kc.load(src, ['n', 'j'])};")
                                                  for name, src in states], vector=True)], parallel=True),
        Loop("s", steps, [
            Stmt(f"const int64_t ts = {f'{steps} - 1 - s' if reverse else 's'};"),
            _blocked_gemm(t, batch, gates, hidden, f"{b_hh}[{{col}}]", f"sol_h[n * {hidden} + k]",
                          f"sol_wt[k * {gates} + {{col}}]",
                          f"sol_g[n * {gates} + {{col}}] = acc[c];", threads),
            Loop("n", batch, [Loop("j", str(hidden), cell, vector=True)], parallel=threads),
        ]),
        Loop("n", batch, [Loop("j", str(hidden), [
            Emit(f"sol_h[n * {hidden} + j]", ("n", "j"), position["h_n"]),
            *([Emit(f"sol_c[n * {hidden} + j]", ("n", "j"), position["c_n"])] if has_cell(mode) else []),
        ], vector=True)], parallel=True),
        Stmt("delete[] sol_h; delete[] sol_g; delete[] sol_wt;" + (" delete[] sol_c;" if has_cell(mode) else "")),
    ]
    return [Block(nodes)]


@kernel("rnn_recurrence_grad")
def rnn_recurrence_grad(layer: Layer, kc: KernelContext) -> list[Node]:
    mode = mode_of(layer.attrs)
    ins = named(layer.inputs, grad_inputs(mode), layer.name)
    position = {name: k for k, name in enumerate(grad_outputs(mode))}
    y, dxp = ins["y"], layer.outputs[0]
    t = ctype_of(dxp, layer)
    steps, batch, hidden = _sizes(layer, y, y)
    gates = MODES[mode] * hidden
    reverse = bool(layer.attrs.get("reverse", False))
    tanh = kc.math("tanh")
    # the backward walks the steps in the opposite order of the forward; ``first`` is the forward's first step
    first, prev = (f"{steps} - 1", "ts + 1") if reverse else ("0", "ts - 1")
    threads = threads_pay_off(y, hidden, gates)

    def res(k: int, step: str = "ts") -> str:
        return kc.load(ins["reserve"], [step, "n", f"({k * hidden} + j)"])

    def gate_grads(parts: list[tuple[str, str]]) -> list[Node]:
        """Per gate k: (gradient of the projected input, gradient of the recurrent pre-activation)."""
        out: list[Node] = []
        for k, (dx, dh) in enumerate(parts):
            column = f"({k * hidden} + j)"
            out += [Stmt(f"sol_d[n * {gates} + {k * hidden} + j] = {dh};"),
                    Emit(dx, ("ts", "n", column), position["dxp"]), Emit(dh, ("ts", "n", column), position["dhp"])]
        return out

    delta = f"sol_dh[n * {hidden} + j]"
    dcell = f"sol_dc[n * {hidden} + j]"
    cell: list[Node] = [Stmt(f"const {t} dh = {kc.load(ins['dy'], ['ts', 'n', 'j'])} + {delta};")]
    if mode == "lstm":
        c_prev = f"(ts == {first} ? {kc.load(ins['c0'], ['n', 'j'])} : {res(4, prev)})"
        cell += [
            Stmt(f"const {t} i = {res(0)}, f = {res(1)}, cand = {res(2)}, o = {res(3)}, c = {res(4)};"),
            Stmt(f"const {t} tc = {tanh}(c);"),
            Stmt(f"const {t} dc = {dcell} + dh * o * (({t})1 - tc * tc);"),
            Stmt(f"const {t} pi = dc * cand * i * (({t})1 - i);"),
            Stmt(f"const {t} pf = dc * {c_prev} * f * (({t})1 - f);"),
            Stmt(f"const {t} pg = dc * i * (({t})1 - cand * cand);"),
            Stmt(f"const {t} po = dh * tc * o * (({t})1 - o);"),
            Stmt(f"{dcell} = dc * f;"),
            *gate_grads([("pi", "pi"), ("pf", "pf"), ("pg", "pg"), ("po", "po")]),
            Stmt(f"{delta} = 0;"),
        ]
    elif mode == "gru":
        h_prev = f"(ts == {first} ? {kc.load(ins['h0'], ['n', 'j'])} : {kc.load(y, [prev, 'n', 'j'])})"
        cell += [
            Stmt(f"const {t} r = {res(0)}, z = {res(1)}, nv = {res(2)}, hn = {res(3)};"),
            Stmt(f"const {t} pn = dh * (({t})1 - z) * (({t})1 - nv * nv);"),
            Stmt(f"const {t} pr = pn * hn * r * (({t})1 - r);"),
            Stmt(f"const {t} pz = dh * ({h_prev} - nv) * z * (({t})1 - z);"),
            *gate_grads([("pr", "pr"), ("pz", "pz"), ("pn", "pn * r")]),
            Stmt(f"{delta} = dh * z;"),
        ]
    else:
        hv = kc.load(y, ["ts", "n", "j"])
        derivative = f"(({t})1 - hv * hv)" if mode == "rnn_tanh" else f"(hv > ({t})0 ? ({t})1 : ({t})0)"
        cell += [Stmt(f"const {t} hv = {hv};"), Stmt(f"const {t} p = dh * {derivative};"),
                 *gate_grads([("p", "p")]), Stmt(f"{delta} = 0;")]

    w_hh = kc.ptr(ins["w_hh"])
    states = [("sol_dh", ins["dh_n"])] + ([("sol_dc", ins["dc_n"])] if has_cell(mode) else [])
    nodes: list[Node] = [
        Stmt(f"{t}* sol_dh = new {t}[{batch} * {hidden}];"),
        *([Stmt(f"{t}* sol_dc = new {t}[{batch} * {hidden}];")] if has_cell(mode) else []),
        Stmt(f"{t}* sol_d = new {t}[{batch} * {gates}];"),
        Loop("n", batch, [Loop("j", str(hidden), [Stmt(f"{name}[n * {hidden} + j] = {kc.load(src, ['n', 'j'])};")
                                                  for name, src in states], vector=True)], parallel=True),
        Loop("s", steps, [
            Stmt(f"const int64_t ts = {'s' if reverse else f'{steps} - 1 - s'};"),
            Loop("n", batch, [Loop("j", str(hidden), cell, vector=True)], parallel=threads),
            # the state gradient of the previous step: its direct part (GRU's dh * z) plus sol_d @ w_hh
            _blocked_gemm(t, batch, hidden, gates, f"sol_dh[n * {hidden} + {{col}}]",
                          f"sol_d[n * {gates} + k]",
                          f"{w_hh}[k * {hidden} + {{col}}]", f"sol_dh[n * {hidden} + {{col}}] = acc[c];", threads),
        ]),
        Loop("n", batch, [Loop("j", str(hidden), [
            Emit(f"sol_dh[n * {hidden} + j]", ("n", "j"), position["dh0"]),
            *([Emit(f"sol_dc[n * {hidden} + j]", ("n", "j"), position["dc0"])] if has_cell(mode) else []),
        ], vector=True)], parallel=True),
        Stmt("delete[] sol_dh; delete[] sol_d;" + (" delete[] sol_dc;" if has_cell(mode) else "")),
    ]
    return [Block(nodes)]
