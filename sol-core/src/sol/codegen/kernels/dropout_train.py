"""Training dropout: Philox-4x32-10 draws keyed by (seed, step, stream), four draws per Philox call.

Draw i is word i % 4 of Philox at counter i // 4 (see `sol.ir.ops.dropout_train`): a pure
function of the element's logical index, so results do not depend on the thread count or the
layout, and the backward recomputes the same mask. The numbers match the numpy reference
bit for bit.

Fast path (one draw per element, the last logical dim innermost in memory): the elements of a
row of the last dim draw from consecutive counters, so the kernel computes `GROUP` counters
at a time into a small buffer (with AVX2: four vectors of four counters through the rounds
side by side, one ``vpmuludq`` per 32x32->64 product; GCC's own vectorization of the
portable code spends three multiplies and many shuffles per product), then masks the row's
elements that group covers in a SIMD loop. Other cases (per-channel draws, channels-last
layouts) compute each element's own draw; per-channel draws are invariant in the spatial
loops, so the compiler hoists them.
"""

from __future__ import annotations

from ...ir import Layer
from ...ir.ops.dropout_train import PHILOX_M, PHILOX_W, scale_factor, threshold
from .. import cexpr
from ..nest import Block, Emit, Loop, Node, Stmt, index_vars, nest_in_order
from .base import KernelContext, ctype_of, kernel, unsupported

#: counters per batch (`PHILOX16`): 64 draws, four AVX2 vectors per word
GROUP = 16

#: The four words of Philox-4x32-10 at ``counter`` into out[0..3] (seed and step captured).
PHILOX = f"""\
auto sol_philox = [seed, step](uint64_t counter, uint32_t stream, uint32_t* out) {{
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = step, c3 = stream;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; ++r) {{
    const uint64_t p0 = (uint64_t){PHILOX_M[0]:#x}u * c0, p1 = (uint64_t){PHILOX_M[1]:#x}u * c2;
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
    k0 += {PHILOX_W[0]:#x}u; k1 += {PHILOX_W[1]:#x}u;
  }}
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}};"""

#: The words of 16 consecutive counters, interleaved: out[4 * k + w] is word w of counter + k.
PHILOX16 = f"""\
auto sol_philox16 = [seed, step, &sol_philox](uint64_t counter, uint32_t stream, uint32_t* out) {{
#if defined(__AVX2__)
  // 64-bit lanes holding 32-bit words: vpmuludq multiplies the low halves, so the high halves
  // may carry junk until the words are packed at the end
  const __m256i m0 = _mm256_set1_epi64x({PHILOX_M[0]:#x}), m1 = _mm256_set1_epi64x({PHILOX_M[1]:#x});
  __m256i c0[4], c1[4], c2[4], c3[4];
  for (int v = 0; v < 4; ++v) {{
    c0[v] = _mm256_add_epi64(_mm256_set1_epi64x((long long)(counter + 4 * v)), _mm256_setr_epi64x(0, 1, 2, 3));
    c1[v] = _mm256_srli_epi64(c0[v], 32);
    c2[v] = _mm256_set1_epi64x(step);
    c3[v] = _mm256_set1_epi64x(stream);
  }}
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; ++r) {{  // the four vectors side by side hide the multiply latency
    const __m256i ka = _mm256_set1_epi64x(k0), kb = _mm256_set1_epi64x(k1);
    for (int v = 0; v < 4; ++v) {{
      const __m256i p0 = _mm256_mul_epu32(c0[v], m0), p1 = _mm256_mul_epu32(c2[v], m1);
      c0[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[v]), ka);
      c2[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[v]), kb);
      c1[v] = p1; c3[v] = p0;
    }}
    k0 += {PHILOX_W[0]:#x}u; k1 += {PHILOX_W[1]:#x}u;
  }}
  for (int v = 0; v < 4; ++v) {{  // (w0 w1) and (w2 w3) per counter, then whole counters in order
    const __m256i a = _mm256_blend_epi32(c0[v], _mm256_slli_epi64(c1[v], 32), 0xAA);
    const __m256i b = _mm256_blend_epi32(c2[v], _mm256_slli_epi64(c3[v], 32), 0xAA);
    const __m256i lo = _mm256_unpacklo_epi64(a, b), hi = _mm256_unpackhi_epi64(a, b);
    _mm256_storeu_si256((__m256i*)(out + 16 * v), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256((__m256i*)(out + 16 * v + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
  }}
#else
  for (int k = 0; k < 16; ++k) sol_philox(counter + k, stream, out + 4 * k);
#endif
}};"""


def _lines(text: str) -> list[Node]:
    return [Stmt(line) for line in text.splitlines()]


def _threshold(layer: Layer) -> str:
    return f"{threshold(float(layer.attrs['p']))}u"


def _scale(layer: Layer) -> str:
    return cexpr.literal(scale_factor(layer.attrs), layer.outputs[0].dtype)


def _masked(layer: Layer, kc: KernelContext, index: list[str], draw: str) -> list[Node]:
    """x * scale where the 32-bit ``draw`` keeps the element, else 0: statements and the Emit.

    The select is an AND of the bits: with a conditional, GCC sinks the multiply into the kept
    branch, and under IEEE trapping semantics it then cannot vectorize the loop.
    """
    x, out = layer.inputs[0], layer.outputs[0]
    t = ctype_of(out, layer)
    bits = {"float32": "uint32_t", "float64": "uint64_t"}.get(out.dtype)
    if bits is None:
        raise unsupported(layer, f"dropout of {out.dtype} (float32 and float64 are supported)")
    return [
        Stmt(f"const {t} xs = ({t})({kc.load(x, index)} * {_scale(layer)});"),
        Stmt(f"{bits} xb; std::memcpy(&xb, &xs, sizeof xb); xb &= ({bits})0 - ({bits})(({draw} >> 8) >= "
             f"{_threshold(layer)});"),
        Stmt(f"{t} xm; std::memcpy(&xm, &xb, sizeof xm);"),
        Emit("xm", tuple(index)),
    ]


@kernel("dropout_train")
def dropout_train(layer: Layer, kc: KernelContext) -> list[Node]:
    key, out = layer.inputs[1], layer.outputs[0]
    stream = int(layer.attrs["stream"]) & 0xFFFFFFFF
    per_channel = bool(layer.attrs.get("per_channel", False))
    fast = out.rank >= 1 and not per_channel and kc.layout(out)[-1] == out.rank - 1
    body = _grouped(layer, kc, stream) if fast else _per_element(layer, kc, stream, per_channel)
    # a scope of its own: several dropout layers share one generated function
    return [Block([
        Stmt(f"const uint64_t seed = (uint64_t){kc.ptr(key)}[0];"),
        Stmt(f"const uint32_t step = (uint32_t)(uint64_t){kc.ptr(key)}[1];"),
        *_lines(PHILOX),
        *body,
    ])]


def _grouped(layer: Layer, kc: KernelContext, stream: int) -> list[Node]:
    """Rows of the last dim, each masked from the words of groups of `GROUP` consecutive counters."""
    out = layer.outputs[0]
    idx = index_vars("i", out.rank)
    outer, last = idx[:-1], idx[-1]
    row = cexpr.size(out.shape[-1])
    base = cexpr.mul(cexpr.linear(outer, out.shape[:-1]), row) if outer else "0"
    group = Loop("g", f"((base + {row} + 3) >> 2)", [
        Stmt(f"uint32_t words[4 * {GROUP}];"),
        Stmt(f"sol_philox16((uint64_t)g, {stream}u, words);"),
        Stmt("const int64_t off = base - 4 * g;  // the draw of the row's element j is words[j + off]"),
        Stmt(f"const int64_t lo = off < 0 ? -off : 0, hi = {row} < 4 * {GROUP} - off ? {row} : 4 * {GROUP} - off;"),
        Loop(last, "hi", _masked(layer, kc, idx, f"words[{last} + off]"), start="lo", vector=True),
    ], start="(base >> 2)", step=str(GROUP), parallel=True, comment="groups of counters covering the row")
    inner: list[Node] = [Stmt(f"const int64_t base = {base};  // draw index of the row's first element"), group]
    memory = [d for d in kc.layout(out) if d != out.rank - 1]
    return [*_lines(PHILOX16),
            *nest_in_order(outer, [cexpr.size(s) for s in out.shape[:-1]], inner, memory, vector_last=False)]


def _per_element(layer: Layer, kc: KernelContext, stream: int, per_channel: bool) -> list[Node]:
    """Each element computes its own draw (the word its index selects of its counter's four)."""
    out = layer.outputs[0]
    idx = index_vars("i", out.rank)
    drawn = idx[:2] if per_channel else idx
    element = cexpr.linear(drawn, out.shape[: len(drawn)])
    draw = (f"auto sol_draw = [&sol_philox](uint64_t d) -> uint32_t {{ uint32_t w[4]; "
            f"sol_philox(d >> 2, {stream}u, w); return w[d & 3]; }};")
    return [Stmt(draw), *nest_in_order(idx, [cexpr.size(s) for s in out.shape],
                                       _masked(layer, kc, idx, f"sol_draw((uint64_t)({element}))"), kc.layout(out))]
