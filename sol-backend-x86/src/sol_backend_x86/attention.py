"""When attention runs as oneDNN matmuls around a DFP softmax instead of SOL's fused attention loop.

The fused loop (sol.codegen.kernels.attention) computes a few query rows at a
time with their scores in registers; it is no GEMM and ran ViT-B/16's
attention (12 heads, 197 x 197 x 64) at ~40 GFLOP/s on two AVX2 cores, 3.1
ms per layer. oneDNN's batched matmul runs q @ k^T and p @ v at 130-150
GFLOP/s: 0.86 ms per layer for both. The lowering (sol.codegen.lowering)
materialises the scores, which pays off only when the products are big
enough; small attention stays one fused loop (no extra calls or buffers).

Masks (bool or additive) and the causal limit go between the two calls (a
``where``/``add`` on the scores, see the lowering). BERT-base's and GPT-2's
attention (12 heads, 128 x 128 x 64, a [1, 1, 128, 128] bool mask) took 0.9
ms per layer in the fused loop on one AVX-512 core and 0.5 ms as matmuls
(process CPU time); whole BERT-base on one thread 170.7 -> 160.3 ms.
"""

from __future__ import annotations

from sol.ir import Layer, is_static

#: q @ k^T multiply-adds (per batch item) from which the matmuls win
MIN_MULTIPLY_ADDS = 1 << 20


def lowers(layer: Layer) -> bool:
    """Whether ``layer`` (an attention) runs as two oneDNN matmuls and a softmax."""
    if layer.op != "attention" or len(layer.inputs) not in (3, 4):
        return False
    q, k, v = layer.inputs[:3]
    if any(t.dtype != "float32" for t in [q, k, v, *layer.outputs]):
        return False
    if len(layer.inputs) == 4 and layer.inputs[3].dtype not in ("float32", "bool"):
        return False
    product = (q.shape[-2], k.shape[-2], q.shape[-1])  # L x S x E, per head
    if not all(is_static(s) for s in product):
        return False  # lengths that vary with the batch: keep the fused loop
    multiply_adds = 1
    for s in (*product, *q.shape[:-2]):
        multiply_adds *= int(s) if is_static(s) else 1  # a wildcard batch counts as 1
    return multiply_adds >= MIN_MULTIPLY_ADDS
