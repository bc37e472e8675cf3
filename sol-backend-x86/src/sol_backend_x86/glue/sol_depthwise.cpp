// bf16 depthwise convolutions on AVX-512 (see sol_depthwise.h).
#include "sol_depthwise.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

namespace sol_depthwise {

namespace {

constexpr int64_t kBlock = 32;  // channels per step

// The channel (within its block of 32) of slot j of the packed order: slots 0-15 are the first register
// ({0-3, 8-11, 16-19, 24-27}), 16-31 the second ({4-7, 12-15, 20-23, 28-31}).
inline int64_t channel_of_slot(int64_t j) {
  const int64_t half = j / 16, i = j % 16;
  return i / 4 * 8 + half * 4 + i % 4;
}

bool cpu_supported() {
#if SOL_HAVE_AVX2
  static const bool supported = sol_kernels::avx512_supported() && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512bf16");
  return supported;
#else
  return false;
#endif
}

}  // namespace

bool Conv::handles(const sol_dnnl_desc& d) {
  const sol_dnnl_tensor &src = d.src, &dst = d.dst, &w = d.weights;
  const int32_t channels_last[] = {0, 2, 3, 1};
  if (d.op != SOL_DNNL_CONV || !d.static_weights || d.src_scale || src.ndims != 4 || dst.ndims != 4 ||
      w.ndims != 5 || src.type != SOL_DNNL_BF16 || dst.type != SOL_DNNL_BF16 ||
      !std::equal(src.order, src.order + 4, channels_last) || !std::equal(dst.order, dst.order + 4, channels_last))
    return false;
  for (int i = 0; i < 5; ++i)
    if (w.order[i] != i) return false;
  // [G][1][1][KH][KW] with G = C = K: one channel per group
  if (w.dims[0] != src.dims[1] || w.dims[1] != 1 || w.dims[2] != 1 || dst.dims[1] != src.dims[1]) return false;
  if (d.dilation[0] != 0 || d.dilation[1] != 0) return false;
  for (int i = 0; i < d.npost; ++i)
    if (d.post[i].kind != SOL_DNNL_ELTWISE || !sol_kernels::eltwise16_computes(d.post[i].alg)) return false;
  return cpu_supported();
}

std::unique_ptr<Conv> Conv::for_desc(const sol_dnnl_desc& d) {
  if (!handles(d)) return nullptr;
  auto conv = std::make_unique<Conv>();
  conv->C = d.src.dims[1];
  conv->KH = d.weights.dims[3], conv->KW = d.weights.dims[4], conv->SH = d.stride[0], conv->SW = d.stride[1];
  conv->pad_t = d.pad_l[0], conv->pad_l = d.pad_l[1], conv->pad_b = d.pad_r[0], conv->pad_r = d.pad_r[1];
  conv->has_bias = d.has_bias != 0;
  for (int i = 0; i < d.npost; ++i) conv->post.push_back({d.post[i].alg, d.post[i].alpha, d.post[i].beta});
  return conv;
}

void Conv::pack(const float* weights, float* packed) const {
  const int64_t taps = KH * KW, blocks = (C + kBlock - 1) / kBlock;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t j = 0; j < kBlock; ++j) {
        const int64_t c = b * kBlock + channel_of_slot(j);
        packed[(b * taps + t) * kBlock + j] = c < C ? weights[c * taps + t] : 0.0f;
      }
}

#if SOL_HAVE_AVX2

#define SOL_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma")))

namespace {

struct Geometry {
  int64_t H, W, C, Ho, Wo;
};

// The 32 bf16 channels at p (masked) as fp32 in the packed order: lo = {0-3, 8-11, ...}, hi = {4-7, 12-15, ...}.
SOL_AVX512_BF16 inline void widen(const uint16_t* p, __mmask32 m, __m512& lo, __m512& hi) {
  const __m512i v = _mm512_maskz_loadu_epi16(m, p), zero = _mm512_setzero_si512();
  lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, v));
  hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, v));
}

// What one step (a block of 32 channels) needs besides its pixels: the masks, the bias in the packed order.
struct Step {
  __mmask32 mask;
  __m512 bias_lo, bias_hi;
  const float* weights;  // this block's packed taps
};

SOL_AVX512_BF16 inline Step step_for(const Conv& conv, const float* packed, const float* bias, int64_t block) {
  Step s;
  const int64_t c = block * kBlock, left = conv.C - c;
  s.mask = left >= kBlock ? ~__mmask32(0) : static_cast<__mmask32>((uint32_t(1) << left) - 1);
  s.weights = packed + block * conv.KH * conv.KW * kBlock;
  s.bias_lo = s.bias_hi = _mm512_setzero_ps();
  if (bias) {
    const __mmask16 m0 = static_cast<__mmask16>(s.mask), m1 = static_cast<__mmask16>(s.mask >> 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, bias + c), b1 = _mm512_maskz_loadu_ps(m1, bias + c + 16);
    // slot j of lo holds channel j / 4 * 8 + j % 4 of the 32: an index into [b0, b1]
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    s.bias_lo = _mm512_permutex2var_ps(b0, lo, b1);
    s.bias_hi = _mm512_permutex2var_ps(b0, _mm512_add_epi32(lo, _mm512_set1_epi32(4)), b1);
  }
  return s;
}

// How the post-ops are applied, a template argument of the kernel: a generic loop over them next to the
// accumulators made the compiler keep fewer of those in registers (a clamp cost 20 us on 56x56x144, 3 us compiled
// in), so the common ones are compiled in.
enum Epilogue { NONE, CLAMP, SWISH, GENERIC };

Epilogue epilogue_of(const std::vector<Activation>& post) {
  if (post.empty()) return NONE;
  if (post.size() == 1 && (post[0].alg == SOL_DNNL_CLIP || (post[0].alg == SOL_DNNL_RELU && post[0].alpha == 0.0f)))
    return CLAMP;
  if (post.size() == 1 && post[0].alg == SOL_DNNL_SWISH) return SWISH;
  return GENERIC;
}

// The post-ops on the N registers v (N / 2 pixels' 32 channels).
template <Epilogue E, int N>
SOL_AVX512_BF16 inline void activate(const Conv& conv, __m512* v) {
  if constexpr (E == CLAMP) {
    const Activation& a = conv.post[0];
    const bool clip = a.alg == SOL_DNNL_CLIP;
    const __m512 lo = _mm512_set1_ps(clip ? a.alpha : 0.0f);
    const __m512 hi = _mm512_set1_ps(clip ? a.beta : std::numeric_limits<float>::infinity());
    SOL_UNROLL
    for (int i = 0; i < N; ++i) v[i] = _mm512_min_ps(_mm512_max_ps(v[i], lo), hi);
  } else if constexpr (E == SWISH) {
    const __m512 alpha = _mm512_set1_ps(conv.post[0].alpha);
    SOL_UNROLL
    for (int i = 0; i < N; ++i) v[i] = _mm512_mul_ps(v[i], sol_kernels::logistic16(_mm512_mul_ps(v[i], alpha)));
  } else if constexpr (E == GENERIC) {
    for (const Activation& a : conv.post)
      for (int i = 0; i < N; ++i) v[i] = sol_kernels::eltwise16(a.alg, a.alpha, a.beta, v[i]);
  }
}

// Rounding to bf16 and the store of one pixel's 32 channels (lo, hi in the packed order).
SOL_AVX512_BF16 inline void store(__m512 lo, __m512 hi, __mmask32 m, uint16_t* y) {
  // cvtne2ps: words 0-15 = lo, 16-31 = hi (rounded to nearest even); channel 8l + r is word 4l + r (r < 4) of lo
  // or 16 + 4l + r - 4 of hi
  const __m512i order = _mm512_set_epi16(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8,
                                         23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
  const __m512i rounded = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  _mm512_mask_storeu_epi16(y, m, _mm512_permutexvar_epi16(order, rounded));
}

// P pixels [ow0, ow0 + P) of output row oh whose windows lie inside the image's columns; kernel width KW and
// stride S fixed, so every input pixel of a kernel row is widened once and used by all the pixels it reaches.
template <int KW, int S, int P, Epilogue E>
SOL_AVX512_BF16 inline void inside(const Conv& conv, const Geometry& g, const uint16_t* x, const Step& s,
                                   uint16_t* y, int64_t oh, int64_t ow0, int64_t c) {
  __m512 acc[2 * P];  // pixel p: acc[2p] (channels {0-3, 8-11, ...}), acc[2p + 1] (the others)
  SOL_UNROLL
  for (int p = 0; p < P; ++p) acc[2 * p] = s.bias_lo, acc[2 * p + 1] = s.bias_hi;
  const int64_t kh0 = std::max<int64_t>(0, conv.pad_t - oh * conv.SH);
  const int64_t kh1 = std::min<int64_t>(conv.KH, g.H + conv.pad_t - oh * conv.SH);
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const uint16_t* row = x + ((oh * conv.SH - conv.pad_t + kh) * g.W + ow0 * S - conv.pad_l) * g.C + c;
    const float* w = s.weights + kh * KW * kBlock;
    __m512 wlo[KW], whi[KW];
    SOL_UNROLL
    for (int k = 0; k < KW; ++k) wlo[k] = _mm512_loadu_ps(w + k * kBlock), whi[k] = _mm512_loadu_ps(w + k * kBlock + 16);
    constexpr int kInputs = (P - 1) * S + KW;
    SOL_UNROLL
    for (int i = 0; i < kInputs; ++i) {
      __m512 xlo, xhi;
      widen(row + i * g.C, s.mask, xlo, xhi);
      SOL_UNROLL
      for (int p = 0; p < P; ++p) {
        const int k = i - p * S;
        if (k >= 0 && k < KW) {
          acc[2 * p] = _mm512_fmadd_ps(xlo, wlo[k], acc[2 * p]);
          acc[2 * p + 1] = _mm512_fmadd_ps(xhi, whi[k], acc[2 * p + 1]);
        }
      }
    }
  }
  activate<E, 2 * P>(conv, acc);
  SOL_UNROLL
  for (int p = 0; p < P; ++p) store(acc[2 * p], acc[2 * p + 1], s.mask, y + (oh * g.Wo + ow0 + p) * g.C + c);
}

// One pixel, its window clipped to the image on both axes (the borders, and kernel shapes without a case).
template <Epilogue E>
SOL_AVX512_BF16 inline void clipped(const Conv& conv, const Geometry& g, const uint16_t* x, const Step& s,
                                    uint16_t* y, int64_t oh, int64_t ow, int64_t c) {
  __m512 acc[2] = {s.bias_lo, s.bias_hi};
  const int64_t ih0 = oh * conv.SH - conv.pad_t, iw0 = ow * conv.SW - conv.pad_l;
  const int64_t kh0 = std::max<int64_t>(0, -ih0), kh1 = std::min<int64_t>(conv.KH, g.H - ih0);
  const int64_t kw0 = std::max<int64_t>(0, -iw0), kw1 = std::min<int64_t>(conv.KW, g.W - iw0);
  for (int64_t kh = kh0; kh < kh1; ++kh)
    for (int64_t kw = kw0; kw < kw1; ++kw) {
      __m512 xlo, xhi;
      widen(x + ((ih0 + kh) * g.W + iw0 + kw) * g.C + c, s.mask, xlo, xhi);
      const float* w = s.weights + (kh * conv.KW + kw) * kBlock;
      acc[0] = _mm512_fmadd_ps(xlo, _mm512_loadu_ps(w), acc[0]);
      acc[1] = _mm512_fmadd_ps(xhi, _mm512_loadu_ps(w + 16), acc[1]);
    }
  activate<E, 2>(conv, acc);
  store(acc[0], acc[1], s.mask, y + (oh * g.Wo + ow) * g.C + c);
}

// One output row of one channel block: borders one pixel at a time, the inside P at a time (KW > 0).
template <int KW, int S, int P, Epilogue E>
SOL_AVX512_BF16 void row(const Conv& conv, const Geometry& g, const uint16_t* x, const Step& s, uint16_t* y,
                         int64_t oh, int64_t c) {
  // inside: pixels [lo, hi) whose windows' columns all lie in the image
  const int64_t lo = std::min(g.Wo, (conv.pad_l + conv.SW - 1) / conv.SW);
  const int64_t last = g.W - conv.KW + conv.pad_l;
  const int64_t hi = last < 0 ? lo : std::max(lo, std::min(g.Wo, last / conv.SW + 1));
  int64_t ow = 0;
  for (; ow < lo; ++ow) clipped<E>(conv, g, x, s, y, oh, ow, c);
  if constexpr (KW > 0) {
    for (; ow + P <= hi; ow += P) inside<KW, S, P, E>(conv, g, x, s, y, oh, ow, c);
    for (; ow < hi; ++ow) inside<KW, S, 1, E>(conv, g, x, s, y, oh, ow, c);
  }
  for (; ow < g.Wo; ++ow) clipped<E>(conv, g, x, s, y, oh, ow, c);
}

// Tasks are (image, output row, channel block): enough for the threads even for 7x7 layers with many channels.
template <int KW, int S, int P, Epilogue E>
void run(const Conv& conv, const Geometry& g, int64_t N, const uint16_t* x, const float* packed, const float* bias,
         uint16_t* y) {
  const int64_t blocks = (g.C + kBlock - 1) / kBlock, rows = N * g.Ho;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n = r / g.Ho;
      const Step s = step_for(conv, packed, bias, b);
      row<KW, S, P, E>(conv, g, x + n * g.H * g.W * g.C, s, y + n * g.Ho * g.Wo * g.C, r % g.Ho, b * kBlock);
    }
}

// The common kernel shapes compiled in; P: output pixels in registers, as many as the 32 registers hold next to
// the KW pairs of weights.
template <Epilogue E>
void run_shape(const Conv& conv, const Geometry& g, int64_t N, const uint16_t* x, const float* packed,
               const float* bias, uint16_t* y) {
  switch (conv.SH == conv.SW ? conv.KW * 10 + conv.SW : 0) {
    case 31: run<3, 1, 8, E>(conv, g, N, x, packed, bias, y); break;
    case 32: run<3, 2, 6, E>(conv, g, N, x, packed, bias, y); break;
    case 51: run<5, 1, 8, E>(conv, g, N, x, packed, bias, y); break;
    case 52: run<5, 2, 4, E>(conv, g, N, x, packed, bias, y); break;
    case 71: run<7, 1, 6, E>(conv, g, N, x, packed, bias, y); break;
    default: run<0, 1, 1, E>(conv, g, N, x, packed, bias, y); break;
  }
}

}  // namespace

void Conv::execute(const sol_dnnl_desc& d, const float* x, const float* packed, const float* bias,
                   const void* const*, float* y) const {
  Geometry g;
  g.H = d.src.dims[2], g.W = d.src.dims[3], g.C = C;
  g.Ho = (g.H + pad_t + pad_b - KH) / SH + 1, g.Wo = (g.W + pad_l + pad_r - KW) / SW + 1;
  const int64_t N = d.src.dims[0];
  const auto* in = reinterpret_cast<const uint16_t*>(x);
  auto* out = reinterpret_cast<uint16_t*>(y);
  const float* b = has_bias ? bias : nullptr;
  switch (epilogue_of(post)) {
    case NONE: run_shape<NONE>(*this, g, N, in, packed, b, out); break;
    case CLAMP: run_shape<CLAMP>(*this, g, N, in, packed, b, out); break;
    case SWISH: run_shape<SWISH>(*this, g, N, in, packed, b, out); break;
    default: run_shape<GENERIC>(*this, g, N, in, packed, b, out); break;
  }
}

#else  // no AVX-512 code path on this target: never used (handles() is false)

void Conv::execute(const sol_dnnl_desc&, const float*, const float*, const float*, const void* const*, float*) const {}

#endif

}  // namespace sol_depthwise
