/* What SOL's own convolution kernels (Winograd, grouped) share: the interface the glue calls them through, and
 * the epilogue (bias and the fused post-ops of the oneDNN descriptor, applied to 8 output channels of a
 * channels-last fp32 output in AVX2 registers).
 */
#ifndef SOL_KERNELS_H
#define SOL_KERNELS_H

#include <cstdint>
#include <vector>

#include "sol_dnnl.h"

namespace sol_kernels {

/* A post-op applied in order: an activation or a binary op with a second tensor. */
struct PostOp {
  enum Kind { RELU, CLIP, BINARY } kind;
  float alpha = 0, beta = 0;   // RELU: negative slope; CLIP: bounds
  int alg = 0;                 // BINARY: SOL_DNNL_ADD .. SOL_DNNL_MIN (sol_dnnl.h)
  enum Broadcast { FULL, CHANNEL, SCALAR } broadcast = FULL;  // how src1 maps onto the NHWC output
};

/* The descriptor's post-ops as the kernels compute them; false when one is not among them (the call then
 * stays with oneDNN). */
bool post_ops_for(const sol_dnnl_desc& d, std::vector<PostOp>* out);

/* Whether this CPU runs the kernels (AVX2 + FMA). */
bool avx2_supported();
/* Whether it also has AVX-512F: the Winograd GEMM then runs on 16-float registers (twice the FMA width). */
bool avx512_supported();

/* A forward call with static weights run by code other than a oneDNN primitive: SOL's own convolutions, or a
 * Linear through MKL's packed GEMM (sol_blas.h). */
struct Kernel {
  virtual ~Kernel() = default;
  /* what sol_dnnl_impl reports, e.g. "grouped_direct:sol:avx2" */
  virtual const char* name() const = 0;
  virtual int64_t packed_floats() const = 0;
  /* the framework's weights (oneDNN's logical order, e.g. [K][C/groups][kh][kw]) -> the kernel's packed format */
  virtual void pack(const float* weights, float* packed) const = 0;
  /* One call at the batch size `d` describes (the fill function's descriptor for it); post_src: src1 of each
   * BINARY post-op. */
  virtual void execute(const sol_dnnl_desc& d, const float* x, const float* packed, const float* bias,
                       const void* const* post_src, float* y) const = 0;
};

/* SOL's own forward convolutions: what they need of a call's descriptor is the NHWC input's N, H and W. */
struct ConvKernel : Kernel {
  /* x: [N][H][W][C] -> y: [N][Ho][Wo][K] (channels-last) */
  virtual void run(int64_t N, int64_t H, int64_t W, const float* x, const float* packed, const float* bias,
                   const void* const* post_src, float* y) const = 0;
  void execute(const sol_dnnl_desc& d, const float* x, const float* packed, const float* bias,
               const void* const* post_src, float* y) const final {
    run(d.src.dims[0], d.src.dims[2], d.src.dims[3], x, packed, bias, post_src, y);
  }
};

}  // namespace sol_kernels

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SOL_AVX2 __attribute__((target("avx2,fma")))
#define SOL_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define SOL_HAVE_AVX2 1
// fixed-size loops over registers: GCC -O2 keeps them rolled and spills the accumulators to the stack
#define SOL_UNROLL _Pragma("GCC unroll 16")

namespace sol_kernels {

SOL_AVX2 inline __m256 binary(int alg, __m256 a, __m256 b) {
  switch (alg) {
    case SOL_DNNL_MUL: return _mm256_mul_ps(a, b);
    case SOL_DNNL_SUB: return _mm256_sub_ps(a, b);
    case SOL_DNNL_DIV: return _mm256_div_ps(a, b);
    case SOL_DNNL_MAX: return _mm256_max_ps(a, b);
    case SOL_DNNL_MIN: return _mm256_min_ps(a, b);
    default: return _mm256_add_ps(a, b);
  }
}

// Bias and the post-ops for 8 output channels [k, k+8) at output offset `at` (in floats, NHWC).
SOL_AVX2 inline __m256 epilogue(const std::vector<PostOp>& post, __m256 value, const float* bias,
                                const void* const* post_src, int64_t at, int64_t k) {
  if (bias) value = _mm256_add_ps(value, _mm256_loadu_ps(bias + k));
  int binary_index = 0;
  for (const PostOp& p : post) {
    if (p.kind == PostOp::RELU) {
      const __m256 negative = _mm256_mul_ps(value, _mm256_set1_ps(p.alpha));
      value = p.alpha == 0.0f ? _mm256_max_ps(value, _mm256_setzero_ps())
                              : _mm256_blendv_ps(value, negative, _mm256_cmp_ps(value, _mm256_setzero_ps(), _CMP_LT_OQ));
    } else if (p.kind == PostOp::CLIP) {
      value = _mm256_min_ps(_mm256_max_ps(value, _mm256_set1_ps(p.alpha)), _mm256_set1_ps(p.beta));
    } else {
      const float* src = static_cast<const float*>(post_src[binary_index++]);
      __m256 other;
      if (p.broadcast == PostOp::FULL) other = _mm256_loadu_ps(src + at);
      else if (p.broadcast == PostOp::CHANNEL) other = _mm256_loadu_ps(src + k);
      else other = _mm256_set1_ps(src[0]);
      value = binary(p.alg, value, other);
    }
  }
  return value;
}

// The post-ops for P values of 8 output channels [k, k+8) at output offsets first + p * stride (floats, NHWC):
// the same as epilogue() without bias, one post-op at a time over all P values (the loop over the post-ops,
// not the arithmetic, is what costs in a kernel with few FMAs per output).
template <int P>
SOL_AVX2 __attribute__((always_inline)) inline void post_ops(const std::vector<PostOp>& post, __m256* values,
                                                             const void* const* post_src,
                              int64_t first, int64_t stride, int64_t k) {
  int binary_index = 0;
  for (const PostOp& op : post) {
    if (op.kind == PostOp::RELU && op.alpha == 0.0f) {
      SOL_UNROLL
      for (int p = 0; p < P; ++p) values[p] = _mm256_max_ps(values[p], _mm256_setzero_ps());
    } else if (op.kind == PostOp::CLIP) {
      const __m256 lo = _mm256_set1_ps(op.alpha), hi = _mm256_set1_ps(op.beta);
      SOL_UNROLL
      for (int p = 0; p < P; ++p) values[p] = _mm256_min_ps(_mm256_max_ps(values[p], lo), hi);
    } else if (op.kind == PostOp::RELU) {
      const __m256 slope = _mm256_set1_ps(op.alpha);
      SOL_UNROLL
      for (int p = 0; p < P; ++p) {
        const __m256 negative = _mm256_cmp_ps(values[p], _mm256_setzero_ps(), _CMP_LT_OQ);
        values[p] = _mm256_blendv_ps(values[p], _mm256_mul_ps(values[p], slope), negative);
      }
    } else {
      const float* src = static_cast<const float*>(post_src[binary_index++]);
      SOL_UNROLL
      for (int p = 0; p < P; ++p) {
        __m256 other;
        if (op.broadcast == PostOp::FULL) other = _mm256_loadu_ps(src + first + p * stride);
        else if (op.broadcast == PostOp::CHANNEL) other = _mm256_loadu_ps(src + k);
        else other = _mm256_set1_ps(src[0]);
        values[p] = binary(op.alg, values[p], other);
      }
    }
  }
}

// ---- AVX-512: the eltwise post-ops on 16 floats (MKL's Linear epilogue, the bf16 depthwise kernel) ----

// e^x, |relative error| < 2e-7: 2^n e^r with n = round(x / ln 2), |r| <= ln 2 / 2, e^r by its Taylor polynomial
// of degree 7 (Horner), 2^n by scalef (which also gives 0 below the float range)
SOL_AVX512 inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-103.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln 2 in two parts: r stays exact
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  for (float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_scalef_ps(p, n);
}

// erf(x) by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7), as oneDNN's GELU post-op computes it
SOL_AVX512 inline __m512 erf16(__m512 x) {
  const __m512 a = _mm512_abs_ps(x);
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(a, _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.0f)));
  __m512 p = _mm512_set1_ps(1.061405429f);
  for (float c : {-1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f}) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
  p = _mm512_mul_ps(p, t);
  const __m512 e = _mm512_fnmadd_ps(p, exp16(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), a), a)), _mm512_set1_ps(1.0f));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(e), _mm512_and_si512(_mm512_castps_si512(x),
                                                                                      _mm512_set1_epi32(INT32_MIN))));
}

// 1 / (1 + e^-x), the reciprocal by rcp14 and one Newton step (|relative error| < 1e-7 where d is finite; a
// division costs 4-8x as much on 512-bit registers, which made SiLU the dearest part of a depthwise layer)
SOL_AVX512 inline __m512 logistic16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 d = _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x)));
  const __m512 r = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));  // r (2 - d r)
}

/* Whether eltwise16 computes this eltwise algorithm of sol_dnnl.h. */
inline bool eltwise16_computes(int alg) {
  switch (alg) {
    case SOL_DNNL_RELU: case SOL_DNNL_CLIP: case SOL_DNNL_LINEAR: case SOL_DNNL_GELU_ERF: case SOL_DNNL_GELU_TANH:
    case SOL_DNNL_LOGISTIC: case SOL_DNNL_SWISH: case SOL_DNNL_HARDSWISH: case SOL_DNNL_HARDSIGMOID:
      return true;
    default:
      return false;
  }
}

/* One eltwise post-op (sol_dnnl.h's algorithms, alpha and beta as oneDNN defines them) on 16 floats. */
SOL_AVX512 inline __m512 eltwise16(int alg, float alpha, float beta, __m512 v) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  switch (alg) {
    case SOL_DNNL_RELU:
      return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, _mm512_set1_ps(alpha));
    case SOL_DNNL_CLIP: return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(alpha)), _mm512_set1_ps(beta));
    case SOL_DNNL_LINEAR: return _mm512_fmadd_ps(v, _mm512_set1_ps(alpha), _mm512_set1_ps(beta));
    case SOL_DNNL_LOGISTIC: return logistic16(v);
    case SOL_DNNL_SWISH: return _mm512_mul_ps(v, logistic16(_mm512_mul_ps(v, _mm512_set1_ps(alpha))));
    case SOL_DNNL_HARDSIGMOID:
    case SOL_DNNL_HARDSWISH: {  // min(max(alpha x + beta, 0), 1), times x for hardswish
      const __m512 gate = _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(v, _mm512_set1_ps(alpha), _mm512_set1_ps(beta)),
                                                      zero), one);
      return alg == SOL_DNNL_HARDSWISH ? _mm512_mul_ps(v, gate) : gate;
    }
    case SOL_DNNL_GELU_ERF: {
      const __m512 e = erf16(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752f)));
      return _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.5f)), _mm512_add_ps(e, one));
    }
    default: {  // GELU_TANH: 1 + tanh(u) = 2 - 2 / (e^{2u} + 1)
      const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.79788456080286536f),
                                     _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(v, v), v), _mm512_set1_ps(0.044715f), v));
      const __m512 e = exp16(_mm512_add_ps(u, u));
      const __m512 two = _mm512_set1_ps(2.0f);
      const __m512 one_plus_tanh = _mm512_sub_ps(two, _mm512_div_ps(two, _mm512_add_ps(e, one)));
      return _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.5f)), one_plus_tanh);
    }
  }
}

}  // namespace sol_kernels

#else
#define SOL_HAVE_AVX2 0
#endif

#endif
