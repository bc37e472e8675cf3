"""When attention runs as oneDNN matmuls around a DFP softmax instead of SOL's fused attention loop.

The fused loop (sol.codegen.kernels.attention) computes a few query rows at a
time with their scores in registers; it is no GEMM and ran ViT-B/16's
attention (12 heads, 197 x 197 x 64) at ~40 GFLOP/s on two AVX2 cores, 3.1
ms per layer. oneDNN's batched matmul runs q @ k^T and p @ v at 130-150
GFLOP/s: 0.86 ms per layer for both. The lowering (sol.codegen.lowering)
materialises the scores, which pays off only when the products are big
enough; small attention stays one fused loop (no extra calls or buffers).
"""

from __future__ import annotations

from sol.ir import Layer, is_static

#: q @ k^T multiply-adds (per batch item) from which the matmuls win
MIN_MULTIPLY_ADDS = 1 << 20


def lowers(layer: Layer) -> bool:
    """Whether ``layer`` (an attention) runs as two oneDNN matmuls and a softmax."""
    if layer.op != "attention" or len(layer.inputs) != 3 or layer.attrs.get("is_causal", False):
        return False  # masks stay in the fused loop (it applies them while the scores are in registers)
    if any(t.dtype != "float32" for t in [*layer.inputs, *layer.outputs]):
        return False
    q, k, _ = layer.inputs
    product = (q.shape[-2], k.shape[-2], q.shape[-1])  # L x S x E, per head
    if not all(is_static(s) for s in product):
        return False  # lengths that vary with the batch: keep the fused loop
    multiply_adds = 1
    for s in (*product, *q.shape[:-2]):
        multiply_adds *= int(s) if is_static(s) else 1  # a wildcard batch counts as 1
    return multiply_adds >= MIN_MULTIPLY_ADDS
