"""Training dropout: a Philox-4x32-10 draw per element (or per (n, c) plane), keyed by (seed, step, stream).

The generator is a lambda at the top of the kernel (no state, no captures),
so every thread computes any element's draw independently: results do not
depend on the thread count, and the backward recomputes the same mask.
The numbers match `sol.ir.ops.dropout_train.philox` bit for bit.
"""

from __future__ import annotations

from ...ir import Layer
from ...ir.ops.dropout_train import PHILOX_M, PHILOX_W, threshold
from .. import cexpr
from ..nest import Block, Emit, Node, Stmt, index_vars, nest_in_order
from .base import KernelContext, ctype_of, kernel

PHILOX = (
    "auto sol_philox = [](uint64_t key, uint64_t counter, uint32_t step, uint32_t stream) -> uint32_t { "
    "uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = step, c3 = stream; "
    "uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32); "
    "for (int r = 0; r < 10; ++r) { "
    f"const uint64_t p0 = (uint64_t){PHILOX_M[0]:#x}u * c0, p1 = (uint64_t){PHILOX_M[1]:#x}u * c2; "
    "const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1; "
    "c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2; "
    f"k0 += {PHILOX_W[0]:#x}u; k1 += {PHILOX_W[1]:#x}u; "
    "} return c0; };"
)


@kernel("dropout_train")
def dropout_train(layer: Layer, kc: KernelContext) -> list[Node]:
    x, key = layer.inputs
    out = layer.outputs[0]
    t = ctype_of(out, layer)
    p = float(layer.attrs["p"])
    idx = index_vars("i", out.rank)
    drawn = idx[:2] if layer.attrs.get("per_channel", False) else idx
    element = cexpr.linear(drawn, out.shape[: len(drawn)])
    scale = cexpr.literal(0.0 if p >= 1.0 else 1.0 / (1.0 - p), out.dtype)
    keep = f"(sol_philox(seed, (uint64_t)({element}), step, {int(layer.attrs['stream']) & 0xFFFFFFFF}u) >> 8) >= {threshold(p)}u"
    value = f"({keep} ? ({t})({kc.load(x, idx)} * {scale}) : ({t})0)"
    # a scope of its own: several dropout layers share one generated function
    return [Block([
        Stmt(PHILOX),
        Stmt(f"const uint64_t seed = (uint64_t){kc.ptr(key)}[0];"),
        Stmt(f"const uint32_t step = (uint32_t)(uint64_t){kc.ptr(key)}[1];"),
        *nest_in_order(idx, [cexpr.size(s) for s in out.shape], [Emit(value, tuple(idx))], kc.layout(out)),
    ])]
