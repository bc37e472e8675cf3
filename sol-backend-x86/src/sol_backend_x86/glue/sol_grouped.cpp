// Grouped and depthwise convolutions for channels-last fp32 on AVX2/FMA: see sol_grouped.h for the method, and
// sol_backend_x86/grouped.py for which layers run here.
#include "sol_grouped.h"

#include <omp.h>

#include <algorithm>
#include <limits>

namespace sol_grouped {

bool Conv::handles(int64_t C, int64_t K, int64_t groups) {
  if (groups < 1 || C % groups != 0 || K % groups != 0 || K % 8 != 0) return false;
  const int64_t Cg = C / groups, Kg = K / groups;
  return Kg % 8 == 0 || ((Kg == 1 || Kg == 4) && Cg == Kg);
}

void Conv::pack(const float* weights, float* packed) const {
  const int64_t Cg = C / groups, taps = KH * KW;
#pragma omp parallel for collapse(2)
  for (int64_t kb = 0; kb < K / 8; ++kb)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t l = 0; l < 8; ++l)
          packed[((kb * taps + t) * Cg + c) * 8 + l] = weights[((kb * 8 + l) * Cg + c) * taps + t];
}

#if SOL_HAVE_AVX2

namespace {

struct Geometry {
  int64_t H, W, C, K, Ho, Wo, Cg, Kg;
  // the post-ops are one relu or clip (MobileNet's ReLU6, ResNeXt's ReLU): min/max in registers, no loop over them
  bool clamp_only;
  float lo, hi;
};

// The permutation that gives lane l input channel c of its group, for groups of KG lanes: (l / KG) * KG + c.
template <int KG>
SOL_AVX2 inline __m256i group_lanes(int c) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i first = _mm256_and_si256(lane, _mm256_set1_epi32(~(KG - 1)));  // KG is a power of two
  return _mm256_add_epi32(first, _mm256_set1_epi32(c));
}

// Output pixels [ow0, ow0 + P) of row `oh`, channels [8 kb, 8 kb + 8): the sums over the taps and the group's
// input channels, in acc. KG: 0 broadcast mode, else lanes per group (in-register mode). CHECK: some of the
// pixels read columns outside the image (the borders); rows outside it are skipped for all pixels alike.
template <int P, int KG, bool CHECK>
SOL_AVX2 inline void accumulate(const Conv& conv, const Geometry& g, const float* image, int64_t oh, int64_t ow0,
                                int64_t kb, const float* weights, __m256* acc) {
  SOL_UNROLL
  for (int p = 0; p < P; ++p) acc[p] = _mm256_setzero_ps();
  const int64_t k0 = kb * 8;
  const int64_t first_channel = KG == 0 ? k0 / g.Kg * g.Cg : k0;  // where the block's input channels start
  for (int64_t kh = 0; kh < conv.KH; ++kh) {
    const int64_t ih = oh * conv.SH - conv.pad_t + kh;
    if (ih < 0 || ih >= g.H) continue;
    const float* row = image + ih * g.W * g.C + first_channel;
    for (int64_t kw = 0; kw < conv.KW; ++kw) {
      const float* w = weights + (kh * conv.KW + kw) * g.Cg * 8;
      const int64_t iw0 = ow0 * conv.SW - conv.pad_l + kw;
      if constexpr (KG == 0) {
        for (int64_t c = 0; c < g.Cg; ++c) {
          const __m256 wv = _mm256_loadu_ps(w + c * 8);
          SOL_UNROLL
          for (int p = 0; p < P; ++p) {
            const int64_t iw = iw0 + p * conv.SW;
            if (CHECK && (iw < 0 || iw >= g.W)) continue;
            acc[p] = _mm256_fmadd_ps(_mm256_broadcast_ss(row + iw * g.C + c), wv, acc[p]);
          }
        }
      } else {
        __m256 wv[KG];
        SOL_UNROLL
        for (int c = 0; c < KG; ++c) wv[c] = _mm256_loadu_ps(w + c * 8);
        SOL_UNROLL
        for (int p = 0; p < P; ++p) {
          const int64_t iw = iw0 + p * conv.SW;
          if (CHECK && (iw < 0 || iw >= g.W)) continue;
          const __m256 xv = _mm256_loadu_ps(row + iw * g.C);
          if constexpr (KG == 1) {
            acc[p] = _mm256_fmadd_ps(xv, wv[0], acc[p]);
          } else {
            SOL_UNROLL
            for (int c = 0; c < KG; ++c)
              acc[p] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(xv, group_lanes<KG>(c)), wv[c], acc[p]);
          }
        }
      }
    }
  }
}

// The same sums for pixels inside the image, kernel width KW and stride S known at compile time: each input
// pixel of a kernel row is loaded once and used for every tap and output pixel it belongs to (P + KW - 1 loads
// for P * KW products at stride 1, where the generic loop loads P * KW times; loads, not FMAs, bound this kernel).
template <int P, int KG, int KW, int S>
SOL_AVX2 inline void accumulate_reusing(const Conv& conv, const Geometry& g, const float* image, int64_t oh,
                                        int64_t ow0, int64_t kb, const float* weights, __m256* acc) {
  constexpr int kInputs = (P - 1) * S + KW, kCg = KG == 0 ? 1 : KG;
  SOL_UNROLL
  for (int p = 0; p < P; ++p) acc[p] = _mm256_setzero_ps();
  const int64_t k0 = kb * 8;
  const int64_t first_channel = KG == 0 ? k0 / g.Kg * g.Cg : k0;
  const int64_t channels = KG == 0 ? g.Cg : 1;  // broadcast mode walks the group's input channels
  for (int64_t kh = 0; kh < conv.KH; ++kh) {
    const int64_t ih = oh * conv.SH - conv.pad_t + kh;
    if (ih < 0 || ih >= g.H) continue;
    const float* x = image + (ih * g.W + ow0 * S - conv.pad_l) * g.C + first_channel;
    const float* w = weights + kh * KW * g.Cg * 8;
    for (int64_t c = 0; c < channels; ++c) {
      SOL_UNROLL
      for (int i = 0; i < kInputs; ++i) {
        __m256 xv;
        if constexpr (KG == 0) xv = _mm256_broadcast_ss(x + i * g.C + c);
        else xv = _mm256_loadu_ps(x + i * g.C);
        SOL_UNROLL
        for (int kw = 0; kw < KW; ++kw) {
          const int d = i - kw;
          if (d < 0 || d % S != 0 || d / S >= P) continue;
          if constexpr (KG == 0) {
            acc[d / S] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w + (kw * g.Cg + c) * 8), acc[d / S]);
          } else if constexpr (KG == 1) {
            acc[d / S] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w + kw * 8), acc[d / S]);
          } else {
            SOL_UNROLL
            for (int cc = 0; cc < kCg; ++cc)
              acc[d / S] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(xv, group_lanes<KG>(cc)),
                                           _mm256_loadu_ps(w + (kw * KG + cc) * 8), acc[d / S]);
          }
        }
      }
    }
  }
}

// Pixels [ow0, ow0 + P) of block kb: the sums (KW > 0: the reusing loop, inside the image only), bias, post-ops.
template <int P, int KG, bool CHECK, int KW = 0, int S = 0>
SOL_AVX2 inline void pixels(const Conv& conv, const Geometry& g, const float* image, const float* packed,
                            const float* bias, const void* const* post_src, float* y, int64_t n, int64_t oh,
                            int64_t ow0, int64_t kb) {
  __m256 acc[P];
  const float* weights = packed + kb * conv.KH * conv.KW * g.Cg * 8;
  if constexpr (KW > 0) accumulate_reusing<P, KG, KW, S>(conv, g, image, oh, ow0, kb, weights, acc);
  else accumulate<P, KG, CHECK>(conv, g, image, oh, ow0, kb, weights, acc);
  // bias and post-ops over the P pixels at once: this runs once per 9 FMAs per pixel of a depthwise 3x3
  const int64_t k = kb * 8, K = g.K, first = ((n * g.Ho + oh) * g.Wo + ow0) * K + k;
  if (bias) {
    const __m256 b = _mm256_loadu_ps(bias + k);
    SOL_UNROLL
    for (int p = 0; p < P; ++p) acc[p] = _mm256_add_ps(acc[p], b);
  }
  if (g.clamp_only) {
    const __m256 lo = _mm256_set1_ps(g.lo), hi = _mm256_set1_ps(g.hi);
    SOL_UNROLL
    for (int p = 0; p < P; ++p) acc[p] = _mm256_min_ps(_mm256_max_ps(acc[p], lo), hi);
  } else if (!conv.post.empty()) {
    sol_kernels::post_ops<P>(conv.post, acc, post_src, first, K, k);
  }
  SOL_UNROLL
  for (int p = 0; p < P; ++p) _mm256_storeu_ps(y + first + p * K, acc[p]);
}

constexpr int kPixels = 8;  // output pixels in registers per step

// Pixels [ow0, ow0 + P) inside the image, channel blocks [kb0, kb1).
template <int P, int KG, int KW, int S>
SOL_AVX2 inline void inside_group(const Conv& conv, const Geometry& g, const float* image, const float* packed,
                                  const float* bias, const void* const* post_src, float* y, int64_t n, int64_t oh,
                                  int64_t ow0, int64_t kb0, int64_t kb1) {
  for (int64_t kb = kb0; kb < kb1; ++kb)
    pixels<P, KG, false, KW, S>(conv, g, image, packed, bias, post_src, y, n, oh, ow0, kb);
}

// One output row, channel blocks [kb0, kb1). Pixels whose taps reach past the image's left or right edge go one
// at a time with checks; the inside 8 at a time (then 4; the last 1-3 like the borders). For each group of pixels the blocks go innermost,
// so the loads walk contiguous channels of the same pixels. KW > 0: kernel width and stride S fixed (see
// accumulate_reusing).
template <int KG, int KW, int S>
SOL_AVX2 void row(const Conv& conv, const Geometry& g, const float* x, const float* packed, const float* bias,
                  const void* const* post_src, float* y, int64_t n, int64_t oh, int64_t kb0, int64_t kb1) {
  const float* image = x + n * g.H * g.W * g.C;
  // inside: every tap of pixels [inside_lo, inside_hi) reads a column of the image (no checks needed)
  const int64_t inside_lo = std::min(g.Wo, (conv.pad_l + conv.SW - 1) / conv.SW);
  const int64_t last = g.W - conv.KW + conv.pad_l;
  const int64_t inside_hi = last < 0 ? inside_lo : std::max(inside_lo, std::min(g.Wo, last / conv.SW + 1));
  auto border = [&](int64_t ow) {
    for (int64_t kb = kb0; kb < kb1; ++kb) pixels<1, KG, true>(conv, g, image, packed, bias, post_src, y, n, oh, ow, kb);
  };
  int64_t ow = 0;
  for (; ow < inside_lo; ++ow) border(ow);
  for (; ow + kPixels <= inside_hi; ow += kPixels)
    inside_group<kPixels, KG, KW, S>(conv, g, image, packed, bias, post_src, y, n, oh, ow, kb0, kb1);
  if (ow + 4 <= inside_hi) {
    inside_group<4, KG, KW, S>(conv, g, image, packed, bias, post_src, y, n, oh, ow, kb0, kb1);
    ow += 4;
  }
  for (; ow < g.Wo; ++ow) border(ow);  // the last 1-3 inside pixels too: one instance per mode, not per width
}

template <int KG, int KW = 0, int S = 0>
void run_mode(const Conv& conv, const Geometry& g, int64_t N, const float* x, const float* packed, const float* bias,
              const void* const* post_src, float* y) {
  // A task is a row with all its channels, so that each pixel group reads its input pixels whole, contiguous
  // memory the prefetchers follow (cold, 56x56x144 depthwise: 1.4x faster than 64-channel slices); rows are
  // split into channel slices only where there are too few rows to share among the threads (7x7 layers).
  const int64_t blocks = g.K / 8, rows = N * g.Ho, wanted = 8 * static_cast<int64_t>(omp_get_max_threads());
  const int64_t chunks = std::min(blocks, std::max<int64_t>(1, (wanted + rows - 1) / rows));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t chunk = 0; chunk < chunks; ++chunk)
      row<KG, KW, S>(conv, g, x, packed, bias, post_src, y, r / g.Ho, r % g.Ho, chunk * blocks / chunks,
                     (chunk + 1) * blocks / chunks);
}

// The common kernel widths and strides get the reusing loop (compiled per case); the rest the generic one.
template <int KG>
void run_width(const Conv& conv, const Geometry& g, int64_t N, const float* x, const float* packed,
               const float* bias, const void* const* post_src, float* y) {
  // each case costs about a second of the glue's (cached) compile: only the shapes of real networks
  const int64_t width = conv.SW == conv.SH ? conv.KW * 10 + conv.SW : 0;
  if (width == 31) return run_mode<KG, 3, 1>(conv, g, N, x, packed, bias, post_src, y);
  if constexpr (KG != 4) {  // groups of 4 are ResNeXt's stride-1 first stage
    if (width == 32) return run_mode<KG, 3, 2>(conv, g, N, x, packed, bias, post_src, y);
  }
  if constexpr (KG == 1) {  // depthwise: MobileNet/EfficientNet's 5x5, ConvNeXt's 7x7
    switch (width) {
      case 51: run_mode<KG, 5, 1>(conv, g, N, x, packed, bias, post_src, y); return;
      case 52: run_mode<KG, 5, 2>(conv, g, N, x, packed, bias, post_src, y); return;
      case 71: run_mode<KG, 7, 1>(conv, g, N, x, packed, bias, post_src, y); return;
      default: break;
    }
  }
  run_mode<KG>(conv, g, N, x, packed, bias, post_src, y);
}

}  // namespace

void Conv::run(int64_t N, int64_t H, int64_t W, const float* x, const float* packed, const float* bias,
               const void* const* post_src, float* y) const {
  Geometry g;
  g.H = H, g.W = W, g.C = C, g.K = K, g.Cg = C / groups, g.Kg = K / groups;
  g.Ho = (H + pad_t + pad_b - KH) / SH + 1, g.Wo = (W + pad_l + pad_r - KW) / SW + 1;
  using sol_kernels::PostOp;
  g.clamp_only = post.size() == 1 && (post[0].kind == PostOp::CLIP || (post[0].kind == PostOp::RELU && post[0].alpha == 0));
  g.lo = post.size() == 1 && post[0].kind == PostOp::CLIP ? post[0].alpha : 0.0f;
  g.hi = post.size() == 1 && post[0].kind == PostOp::CLIP ? post[0].beta : std::numeric_limits<float>::infinity();
  const float* b = has_bias ? bias : nullptr;
  switch (g.Kg % 8 == 0 ? 0 : g.Kg) {
    case 0: run_width<0>(*this, g, N, x, packed, b, post_src, y); break;
    case 1: run_width<1>(*this, g, N, x, packed, b, post_src, y); break;
    default: run_width<4>(*this, g, N, x, packed, b, post_src, y); break;
  }
}

#else  // no AVX2 code path on this target: never used (sol_kernels::avx2_supported() is false)

void Conv::run(int64_t, int64_t, int64_t, const float*, const float*, const float*, const void* const*,
               float*) const {}

#endif

}  // namespace sol_grouped
