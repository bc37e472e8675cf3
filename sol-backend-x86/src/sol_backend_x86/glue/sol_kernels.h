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

}  // namespace sol_kernels

#else
#define SOL_HAVE_AVX2 0
#endif

#endif
