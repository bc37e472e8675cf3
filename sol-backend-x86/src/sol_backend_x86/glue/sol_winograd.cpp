// Winograd F(4x4, 3x3) and F(2x2, 3x3) for channels-last fp32 on AVX2/FMA and AVX-512: see sol_winograd.h for the
// method, and sol_backend_x86/winograd.py for which tile size runs where (F(4x4) only on request: its float32 error).
#include "sol_winograd.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace sol_winograd {

namespace {

// F(T x T, 3x3): T outputs per tile side from T + 2 inputs, (T + 2)^2 transform points (one GEMM each)
template <int T>
struct Tile {
  static constexpr int kTile = T, kPatch = T + 2, kPoints = (T + 2) * (T + 2);
};
constexpr int kRows = 6;  // GEMM micro-kernels: 6 tiles by 16 output channels (AVX2: 12 accumulators) or
constexpr int kCols = 16;  // by 64 (AVX-512: 24 of its 32 registers), so U's slice is read once per 6 tiles
constexpr int kWideCols = 64;
// Without a schedule from the autotuner, run_blocks takes transformed weights up to this size (they stay in a
// core's L2). Measured against the phases (2 threads, warm): 1.1-1.2x on 55x55 16 -> 64, 27x27 32 -> 128,
// 13x13 32 -> 128; even on 56x56 64 -> 64; slower from 28x28 128 -> 128 (1 MiB) up. With the weights evicted
// (as inside a model) blocks won up to 1.5 MiB instead (docs/x86.md): hence the timing per layer.
constexpr int64_t kBlockedWeightBytes = 512 << 10;
// tiles per block in run_blocks (12 and 48 measured within a few percent of it)
constexpr int64_t kBlockRows = 24;

// Per-thread scratch: the transformed input and the GEMM results of a block (run_blocks: every thread its own)
// or of a chunk (run_phases: the calling thread's, shared by the team).
thread_local std::vector<float> scratch_v, scratch_m;

float* grow(std::vector<float>& buffer, size_t floats) {
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

// Tiles per chunk: V and M of one chunk (points x tiles x (C + K) floats) stay within about 4 MiB of L2/L3, so
// the three phases hand their data on in cache; big batches run as several chunks (U is re-read per chunk).
int64_t chunk_tiles(int points, int64_t C, int64_t K, int64_t tiles) {
  const int64_t budget = (4 << 20) / (points * (C + K) * 4);
  int64_t chunk = std::max<int64_t>(budget, 4 * kRows);
  chunk = (chunk + kRows - 1) / kRows * kRows;
  return std::min(chunk, tiles);
}

}  // namespace

#if SOL_HAVE_AVX2

namespace {

struct Geometry {
  int64_t N, H, W, C, K, Ho, Wo, tiles_h, tiles_w, tiles;
};

// The transforms are written once on GCC vector types (__m256 or __m512) with plain operators, no intrinsics, and
// always inlined: each compiles to the instruction set of the kernel it is inlined into (AVX2 for 8 channels at
// a time, AVX-512 for 16).
#define SOL_INLINE __attribute__((always_inline)) inline

// 1-D input transforms B^T d (the rows of B^T: Lavin & Gray), F(4,3) on six vectors and F(2,3) on four.
template <int T, typename V>
SOL_INLINE void input_1d(const V* d, V* r) {
  if constexpr (T == 4) {
    r[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    const V a = d[4] - 4.0f * d[2];  // d4 - 4 d2
    const V b = d[3] - 4.0f * d[1];  // d3 - 4 d1
    r[1] = a + b;
    r[2] = a - b;
    const V c = d[4] - d[2];           // d4 - d2
    const V e = 2.0f * (d[3] - d[1]);  // 2 (d3 - d1)
    r[3] = c + e;
    r[4] = c - e;
    r[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
  } else {
    r[0] = d[0] - d[2];
    r[1] = d[1] + d[2];
    r[2] = d[2] - d[1];
    r[3] = d[1] - d[3];
  }
}

// 1-D output transforms A^T m: six vectors -> four (F(4,3)), four -> two (F(2,3)).
template <int T, typename V>
SOL_INLINE void output_1d(const V* m, V* o) {
  if constexpr (T == 4) {
    const V a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], e = m[3] - m[4];
    o[0] = m[0] + a + c;
    o[1] = b + 2.0f * e;
    o[2] = a + 4.0f * c;
    o[3] = b + 8.0f * e + m[5];
  } else {
    o[0] = m[0] + m[1] + m[2];
    o[1] = m[1] - m[2] - m[3];
  }
}

template <typename V>
SOL_INLINE void load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

template <typename V>
SOL_INLINE void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// B^T d B of one patch, in place (columns, then rows).
template <int T, typename V>
SOL_INLINE void transform_input(V (&d)[Tile<T>::kPatch][Tile<T>::kPatch]) {
  constexpr int kPatch = Tile<T>::kPatch;
  SOL_UNROLL
  for (int j = 0; j < kPatch; ++j) {
    V column[kPatch], out[kPatch];
    SOL_UNROLL
    for (int i = 0; i < kPatch; ++i) column[i] = d[i][j];
    input_1d<T>(column, out);
    SOL_UNROLL
    for (int i = 0; i < kPatch; ++i) d[i][j] = out[i];
  }
  SOL_UNROLL
  for (int i = 0; i < kPatch; ++i) {
    V out[kPatch];
    input_1d<T>(d[i], out);
    SOL_UNROLL
    for (int j = 0; j < kPatch; ++j) d[i][j] = out[j];
  }
}

// A^T m A of one tile's kPoints GEMM results (read from M at `at`, point p at at + p * point_stride).
template <int T, typename V>
SOL_INLINE void transform_output(const float* M, int64_t at, int64_t point_stride, V (&o)[T][T]) {
  constexpr int kPatch = Tile<T>::kPatch;
  V tmp[T][kPatch];
  SOL_UNROLL
  for (int j = 0; j < kPatch; ++j) {  // A^T m along the columns
    V column[kPatch], out[T];
    SOL_UNROLL
    for (int i = 0; i < kPatch; ++i) load(column[i], M + at + (i * kPatch + j) * point_stride);
    output_1d<T>(column, out);
    SOL_UNROLL
    for (int i = 0; i < T; ++i) tmp[i][j] = out[i];
  }
  SOL_UNROLL
  for (int i = 0; i < T; ++i) output_1d<T>(tmp[i], o[i]);  // then along the rows
}

SOL_AVX2 inline __m256i lane_mask(int64_t lanes) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)), index);
}

// Channels [c, c + lanes of V) of the input patch at (y0, x0) (zero outside the image unless INSIDE: the patch
// lies in it, no test per pixel), transformed and stored to its kPoints rows of Vt (row `row` of `chunk`).
template <int T, typename V, bool INSIDE>
SOL_INLINE void input_group(const Geometry& g, const float* image, int64_t y0, int64_t x0, int64_t c, int64_t row,
                            int64_t chunk, float* Vt) {
  constexpr int kPatch = Tile<T>::kPatch;
  V d[kPatch][kPatch];
  SOL_UNROLL
  for (int i = 0; i < kPatch; ++i) {
    SOL_UNROLL
    for (int j = 0; j < kPatch; ++j) {
      const int64_t yy = y0 + i, xx = x0 + j;
      if (INSIDE || (yy >= 0 && yy < g.H && xx >= 0 && xx < g.W)) load(d[i][j], image + (yy * g.W + xx) * g.C + c);
      else d[i][j] = V{};
    }
  }
  transform_input<T>(d);
  SOL_UNROLL
  for (int i = 0; i < kPatch; ++i)
    SOL_UNROLL
    for (int j = 0; j < kPatch; ++j) store(Vt + ((i * kPatch + j) * chunk + row) * g.C + c, d[i][j]);
}

// The last C % 8 channels (from c), by masked loads and stores.
template <int T, bool INSIDE>
SOL_AVX2 void input_tail(const Geometry& g, const float* image, int64_t y0, int64_t x0, int64_t c, int64_t row,
                         int64_t chunk, float* Vt) {
  constexpr int kPatch = Tile<T>::kPatch;
  const __m256i mask = lane_mask(g.C - c);
  __m256 d[kPatch][kPatch];
  for (int i = 0; i < kPatch; ++i) {
    for (int j = 0; j < kPatch; ++j) {
      const int64_t yy = y0 + i, xx = x0 + j;
      d[i][j] = INSIDE || (yy >= 0 && yy < g.H && xx >= 0 && xx < g.W)
                    ? _mm256_maskload_ps(image + (yy * g.W + xx) * g.C + c, mask)
                    : _mm256_setzero_ps();
    }
  }
  transform_input<T>(d);
  for (int i = 0; i < kPatch; ++i)
    for (int j = 0; j < kPatch; ++j) _mm256_maskstore_ps(Vt + ((i * kPatch + j) * chunk + row) * g.C + c, mask, d[i][j]);
}

// Every channel of one patch: 8 at a time (AVX2), or 16 (AVX-512) and then what is left.
template <int T, bool INSIDE>
SOL_AVX2 void input_channels(const Geometry& g, const float* image, int64_t y0, int64_t x0, int64_t c, int64_t row,
                             int64_t chunk, float* Vt) {
  for (; c + 8 <= g.C; c += 8) input_group<T, __m256, INSIDE>(g, image, y0, x0, c, row, chunk, Vt);
  if (c < g.C) input_tail<T, INSIDE>(g, image, y0, x0, c, row, chunk, Vt);
}

template <int T, bool INSIDE>
SOL_AVX512 void input_channels_wide(const Geometry& g, const float* image, int64_t y0, int64_t x0, int64_t row,
                                    int64_t chunk, float* Vt) {
  int64_t c = 0;
  for (; c + 16 <= g.C; c += 16) input_group<T, __m512, INSIDE>(g, image, y0, x0, c, row, chunk, Vt);
  input_channels<T, INSIDE>(g, image, y0, x0, c, row, chunk, Vt);
}

// Transforms tile `t` (global index) into Vt (row `row` of the chunk), every channel; `wide`: on AVX-512.
template <int T>
SOL_AVX2 void input_tile(const Geometry& g, const Conv& conv, const float* x, int64_t t, int64_t row,
                         int64_t chunk, float* Vt, bool wide) {
  constexpr int kTile = Tile<T>::kTile, kPatch = Tile<T>::kPatch;
  const int64_t n = t / (g.tiles_h * g.tiles_w), rest = t % (g.tiles_h * g.tiles_w);
  const int64_t y0 = rest / g.tiles_w * kTile - conv.pad_t, x0 = rest % g.tiles_w * kTile - conv.pad_l;
  const float* image = x + n * g.H * g.W * g.C;
  if (y0 >= 0 && x0 >= 0 && y0 + kPatch <= g.H && x0 + kPatch <= g.W) {
    if (wide) input_channels_wide<T, true>(g, image, y0, x0, row, chunk, Vt);
    else input_channels<T, true>(g, image, y0, x0, 0, row, chunk, Vt);
  } else {
    if (wide) input_channels_wide<T, false>(g, image, y0, x0, row, chunk, Vt);
    else input_channels<T, false>(g, image, y0, x0, 0, row, chunk, Vt);
  }
}

// M[rows x 16*W] = V[rows x C] * U[C x 16*W]: the GEMM micro-kernel, `rows` tiles by 8*blocks output channels.
template <int ROWS, int BLOCKS>
SOL_AVX2 void gemm_tile(const float* v, int64_t v_stride, const float* u, int64_t u_stride, int64_t C, float* m,
                        int64_t m_stride) {
  __m256 acc[ROWS][BLOCKS];
  SOL_UNROLL
  for (int r = 0; r < ROWS; ++r)
    SOL_UNROLL
    for (int b = 0; b < BLOCKS; ++b) acc[r][b] = _mm256_setzero_ps();
  for (int64_t c = 0; c < C; ++c) {
    __m256 w[BLOCKS];
    SOL_UNROLL
    for (int b = 0; b < BLOCKS; ++b) w[b] = _mm256_loadu_ps(u + c * u_stride + 8 * b);
    SOL_UNROLL
    for (int r = 0; r < ROWS; ++r) {
      const __m256 a = _mm256_broadcast_ss(v + r * v_stride + c);
      SOL_UNROLL
      for (int b = 0; b < BLOCKS; ++b) acc[r][b] = _mm256_fmadd_ps(a, w[b], acc[r][b]);
    }
  }
  SOL_UNROLL
  for (int r = 0; r < ROWS; ++r)
    SOL_UNROLL
    for (int b = 0; b < BLOCKS; ++b) _mm256_storeu_ps(m + r * m_stride + 8 * b, acc[r][b]);
}

template <int BLOCKS>
SOL_AVX2 void gemm_rows(int rows, const float* v, int64_t v_stride, const float* u, int64_t u_stride, int64_t C,
                        float* m, int64_t m_stride) {
  switch (rows) {
    case 6: gemm_tile<6, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride); break;
    case 5: gemm_tile<5, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride); break;
    case 4: gemm_tile<4, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride); break;
    case 3: gemm_tile<3, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride); break;
    case 2: gemm_tile<2, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride); break;
    default: gemm_tile<1, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride); break;
  }
}

// The AVX-512 micro-kernel: M[rows x 16*BLOCKS] = V[rows x C] * U[C x 16*BLOCKS], the last block of 16 columns
// masked to `last` (K need only be a multiple of 8). On cores with 512-bit FMA units it does twice the work of
// gemm_tile per instruction, and the GEMMs are most of a Winograd convolution's time.
template <int ROWS, int BLOCKS>
SOL_AVX512 void gemm_tile_wide(const float* v, int64_t v_stride, const float* u, int64_t u_stride, int64_t C,
                               float* m, int64_t m_stride, __mmask16 last) {
  __m512 acc[ROWS][BLOCKS];
  SOL_UNROLL
  for (int r = 0; r < ROWS; ++r)
    SOL_UNROLL
    for (int b = 0; b < BLOCKS; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int64_t c = 0; c < C; ++c) {
    __m512 w[BLOCKS];
    SOL_UNROLL
    for (int b = 0; b < BLOCKS - 1; ++b) w[b] = _mm512_loadu_ps(u + c * u_stride + 16 * b);
    w[BLOCKS - 1] = _mm512_maskz_loadu_ps(last, u + c * u_stride + 16 * (BLOCKS - 1));
    SOL_UNROLL
    for (int r = 0; r < ROWS; ++r) {
      const __m512 a = _mm512_set1_ps(v[r * v_stride + c]);
      SOL_UNROLL
      for (int b = 0; b < BLOCKS; ++b) acc[r][b] = _mm512_fmadd_ps(a, w[b], acc[r][b]);
    }
  }
  SOL_UNROLL
  for (int r = 0; r < ROWS; ++r) {
    SOL_UNROLL
    for (int b = 0; b < BLOCKS - 1; ++b) _mm512_storeu_ps(m + r * m_stride + 16 * b, acc[r][b]);
    _mm512_mask_storeu_ps(m + r * m_stride + 16 * (BLOCKS - 1), last, acc[r][BLOCKS - 1]);
  }
}

template <int BLOCKS>
SOL_AVX512 void gemm_rows_wide(int rows, const float* v, int64_t v_stride, const float* u, int64_t u_stride,
                               int64_t C, float* m, int64_t m_stride, __mmask16 last) {
  switch (rows) {
    case 6: gemm_tile_wide<6, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride, last); break;
    case 5: gemm_tile_wide<5, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride, last); break;
    case 4: gemm_tile_wide<4, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride, last); break;
    case 3: gemm_tile_wide<3, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride, last); break;
    case 2: gemm_tile_wide<2, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride, last); break;
    default: gemm_tile_wide<1, BLOCKS>(v, v_stride, u, u_stride, C, m, m_stride, last); break;
  }
}

// `rows` tiles by `width` (at most kWideCols, a multiple of 8) output channels on AVX-512.
SOL_AVX512 void gemm_wide(int rows, int64_t width, const float* v, int64_t v_stride, const float* u,
                          int64_t u_stride, int64_t C, float* m, int64_t m_stride) {
  const __mmask16 last = width % 16 == 0 ? __mmask16(0xFFFF) : __mmask16((1u << (width % 16)) - 1);
  switch ((width + 15) / 16) {
    case 4: gemm_rows_wide<4>(rows, v, v_stride, u, u_stride, C, m, m_stride, last); break;
    case 3: gemm_rows_wide<3>(rows, v, v_stride, u, u_stride, C, m, m_stride, last); break;
    case 2: gemm_rows_wide<2>(rows, v, v_stride, u, u_stride, C, m, m_stride, last); break;
    default: gemm_rows_wide<1>(rows, v, v_stride, u, u_stride, C, m, m_stride, last); break;
  }
}

// `rows` tiles by `width` (16 or 8) output channels on AVX2.
SOL_AVX2 void gemm_narrow(int rows, int64_t width, const float* v, int64_t v_stride, const float* u,
                          int64_t u_stride, int64_t C, float* m, int64_t m_stride) {
  if (width == kCols) gemm_rows<2>(rows, v, v_stride, u, u_stride, C, m, m_stride);
  else gemm_rows<1>(rows, v, v_stride, u, u_stride, C, m, m_stride);
}

// Output channels [k, k + 8) of one tile from M (row `row` of `chunk`), with the bias and post-ops, into y at
// `base` (the tile's first output); rows x cols of it lie inside the output. A whole tile keeps every value in
// registers (compile-time loops) and applies each post-op to a row of T outputs at once.
template <int T>
SOL_AVX2 inline void output_group(const Geometry& g, const Conv& conv, const float* M, int64_t row, int64_t chunk,
                                  int64_t k, int64_t base, int rows, int cols, const float* bias,
                                  const void* const* post_src, float* y) {
  __m256 o[T][T];
  transform_output<T>(M, row * g.K + k, chunk * g.K, o);
  if (rows == T && cols == T) {
    const __m256 b = bias ? _mm256_loadu_ps(bias + k) : _mm256_setzero_ps();
    SOL_UNROLL
    for (int i = 0; i < T; ++i) {
      SOL_UNROLL
      for (int j = 0; j < T; ++j) o[i][j] = _mm256_add_ps(o[i][j], b);
      const int64_t at = base + i * g.Wo * g.K + k;
      sol_kernels::post_ops<T>(conv.post, o[i], post_src, at, g.K, k);
      SOL_UNROLL
      for (int j = 0; j < T; ++j) _mm256_storeu_ps(y + at + j * g.K, o[i][j]);
    }
    return;
  }
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      const int64_t at = base + (i * g.Wo + j) * g.K + k;
      _mm256_storeu_ps(y + at, sol_kernels::epilogue(conv.post, o[i][j], bias, post_src, at, k));
    }
  }
}

// A whole tile's output channels 16 at a time on AVX-512 (the post-ops on each half); returns the first channel
// left (K % 16 == 8: the last 8 go through output_group).
template <int T>
SOL_AVX512 int64_t output_whole_wide(const Geometry& g, const Conv& conv, const float* M, int64_t row,
                                     int64_t chunk, int64_t base, const float* bias, const void* const* post_src,
                                     float* y) {
  int64_t k = 0;
  for (; k + 16 <= g.K; k += 16) {
    __m512 o[T][T];
    transform_output<T>(M, row * g.K + k, chunk * g.K, o);
    const __m512 b = bias ? _mm512_loadu_ps(bias + k) : _mm512_setzero_ps();
    SOL_UNROLL
    for (int i = 0; i < T; ++i) {
      const int64_t at = base + i * g.Wo * g.K + k;
      if (conv.post.empty()) {
        SOL_UNROLL
        for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + at + j * g.K, _mm512_add_ps(o[i][j], b));
        continue;
      }
      __m256 low[T], high[T];
      SOL_UNROLL
      for (int j = 0; j < T; ++j) {
        const __m512 v = _mm512_add_ps(o[i][j], b);
        low[j] = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
        high[j] = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
      }
      sol_kernels::post_ops<T>(conv.post, low, post_src, at, g.K, k);
      sol_kernels::post_ops<T>(conv.post, high, post_src, at + 8, g.K, k + 8);
      SOL_UNROLL
      for (int j = 0; j < T; ++j) {
        _mm256_storeu_ps(y + at + j * g.K, low[j]);
        _mm256_storeu_ps(y + at + j * g.K + 8, high[j]);
      }
    }
  }
  return k;
}

// Tile `t` (global), row `row` of the chunk: M -> T x T outputs for every output channel, into y.
template <int T>
SOL_AVX2 void output_tile(const Geometry& g, const Conv& conv, const float* M, int64_t t, int64_t row,
                          int64_t chunk, const float* bias, const void* const* post_src, float* y, bool wide) {
  const int64_t n = t / (g.tiles_h * g.tiles_w), rest = t % (g.tiles_h * g.tiles_w);
  const int64_t y0 = rest / g.tiles_w * T, x0 = rest % g.tiles_w * T;
  const int rows = static_cast<int>(std::min<int64_t>(T, g.Ho - y0));
  const int cols = static_cast<int>(std::min<int64_t>(T, g.Wo - x0));
  const int64_t base = ((n * g.Ho + y0) * g.Wo + x0) * g.K;
  int64_t k = 0;
  if (wide && rows == T && cols == T) k = output_whole_wide<T>(g, conv, M, row, chunk, base, bias, post_src, y);
  for (; k < g.K; k += 8) output_group<T>(g, conv, M, row, chunk, k, base, rows, cols, bias, post_src, y);
}

// M[r][cb, cb + width) = V[r] * U[:, cb, cb + width) for rows r in [lo, hi) of one transform point, kRows rows
// per micro-kernel call (width: at most kWideCols with AVX-512, kCols without).
inline void gemm_rows_block(bool wide, int64_t lo, int64_t hi, int64_t width, const float* v, const float* u,
                            float* m, int64_t C, int64_t K) {
  for (int64_t r = lo; r < hi; r += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, hi - r));
    if (wide) gemm_wide(rows, width, v + r * C, C, u, K, C, m + r * K, K);
    else gemm_narrow(rows, width, v + r * C, C, u, K, C, m + r * K, K);
  }
}

// Geometry of a call: the output size and its T x T tiles.
template <int T>
Geometry geometry(const Conv& conv, int64_t N, int64_t H, int64_t W) {
  Geometry g;
  g.N = N, g.H = H, g.W = W, g.C = conv.C, g.K = conv.K;
  g.Ho = H + conv.pad_t + conv.pad_b - 2, g.Wo = W + conv.pad_l + conv.pad_r - 2;
  g.tiles_h = (g.Ho + T - 1) / T, g.tiles_w = (g.Wo + T - 1) / T;
  g.tiles = N * g.tiles_h * g.tiles_w;
  return g;
}

// Small transformed weights (U in the L2 cache): each thread takes a block of tiles through all three phases
// on its own, so V and M never leave its L1/L2 and no phase waits for the other threads. U is read once per
// block (kRows tiles per micro-kernel call keep its slices in L1 meanwhile).
template <int T>
void run_blocks(const Conv& conv, const Geometry& g, const float* x, const float* packed, const float* bias,
                const void* const* post_src, float* y) {
  constexpr int kPoints = Tile<T>::kPoints;
  const int64_t C = g.C, K = g.K;
  const bool wide = sol_kernels::avx512_supported();
  const int64_t cols = wide ? kWideCols : kCols;
#pragma omp parallel
  {
    // each thread its own contiguous share of the tiles (no imbalance beyond one tile), in equal blocks of at
    // most kBlockRows tiles
    const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t lo = g.tiles * id / threads, hi = g.tiles * (id + 1) / threads;
    const int64_t blocks = (hi - lo + kBlockRows - 1) / kBlockRows;
    const int64_t block = blocks > 0 ? (hi - lo + blocks - 1) / blocks : 0;
    float* V = grow(scratch_v, static_cast<size_t>(kPoints * block * C));
    float* M = grow(scratch_m, static_cast<size_t>(kPoints * block * K));
    for (int64_t first = lo; first < hi; first += block) {
      const int64_t count = std::min(block, hi - first);
      for (int64_t r = 0; r < count; ++r) input_tile<T>(g, conv, x, first + r, r, block, V, wide);
      for (int p = 0; p < kPoints; ++p)
        for (int64_t cb = 0; cb < K; cb += cols)
          gemm_rows_block(wide, 0, count, std::min(cols, K - cb), V + p * block * C, packed + p * C * K + cb,
                          M + p * block * K + cb, C, K);
      for (int64_t r = 0; r < count; ++r) output_tile<T>(g, conv, M, first + r, r, block, bias, post_src, y, wide);
    }
  }
}

// Large transformed weights: the three phases one after the other over chunks of tiles, all threads in each,
// so every thread reads only its share of U (see the GEMM tasks below).
template <int T>
void run_phases(const Conv& conv, const Geometry& g, const float* x, const float* packed, const float* b,
                const void* const* post_src, float* y) {
  constexpr int kPoints = Tile<T>::kPoints;
  const int64_t C = g.C, K = g.K;
  const int64_t chunk = chunk_tiles(kPoints, C, K, g.tiles);
  float* V = grow(scratch_v, static_cast<size_t>(kPoints * chunk * C));
  float* M = grow(scratch_m, static_cast<size_t>(kPoints * chunk * K));
  // K is a multiple of 8 (see the eligibility check): the last column block may be narrower
  const bool wide = sol_kernels::avx512_supported();
  const int64_t cols = wide ? kWideCols : kCols, col_tasks = (K + cols - 1) / cols;
  const int64_t row_groups = (chunk + kRows - 1) / kRows;
#pragma omp parallel
  for (int64_t first = 0; first < g.tiles; first += chunk) {
    const int64_t count = std::min(chunk, g.tiles - first);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < count; ++r) input_tile<T>(g, conv, x, first + r, r, chunk, V, wide);
    // one task: a transform point, a block of output channels, a group of rows; the rows go innermost so a
    // task's slice of U stays in L1 while it walks its V rows
    const int64_t groups = std::min<int64_t>(row_groups, (count + kRows - 1) / kRows);
    // the rows are split only where points x column blocks leave fewer than 4 tasks per thread: each split
    // reads a task's slice of U once more (14x14x256 on 2 threads: GEMMs 0.43 ms split in 4, 0.35 ms unsplit)
    const int64_t per_thread = kPoints * col_tasks / omp_get_num_threads();
    const int64_t row_split = std::clamp<int64_t>(4 / std::max<int64_t>(per_thread, 1), 1, std::max<int64_t>(groups, 1));
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int64_t p = 0; p < kPoints; ++p) {
      for (int64_t cb = 0; cb < col_tasks; ++cb) {
        for (int64_t part = 0; part < row_split; ++part) {
          const int64_t lo = part * groups / row_split * kRows, hi = std::min(count, (part + 1) * groups / row_split * kRows);
          gemm_rows_block(wide, lo, hi, std::min(cols, K - cb * cols), V + p * chunk * C,
                          packed + p * C * K + cb * cols, M + p * chunk * K + cb * cols, C, K);
        }
      }
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < count; ++r) output_tile<T>(g, conv, M, first + r, r, chunk, b, post_src, y, wide);
  }
}

template <int T>
void run_tiles(const Conv& conv, int64_t N, int64_t H, int64_t W, const float* x, const float* packed,
               const float* bias, const void* const* post_src, float* y) {
  const Geometry g = geometry<T>(conv, N, H, W);
  const float* b = conv.has_bias ? bias : nullptr;
  const int64_t u_bytes = int64_t{Tile<T>::kPoints} * g.C * g.K * 4;
  const bool blocks = conv.schedule == Conv::BY_WEIGHT_SIZE ? u_bytes <= kBlockedWeightBytes
                                                             : conv.schedule == Conv::BLOCKS;
  if (blocks) run_blocks<T>(conv, g, x, packed, b, post_src, y);
  else run_phases<T>(conv, g, x, packed, b, post_src, y);
}

}  // namespace

void Conv::run(int64_t N, int64_t H, int64_t W, const float* x, const float* packed, const float* bias,
               const void* const* post_src, float* y) const {
  if (tile == 2) run_tiles<2>(*this, N, H, W, x, packed, bias, post_src, y);
  else run_tiles<4>(*this, N, H, W, x, packed, bias, post_src, y);
}

#else  // no AVX2 code path on this target: never used (sol_kernels::avx2_supported() is false)

void Conv::run(int64_t, int64_t, int64_t, const float*, const float*, const float*, const void* const*,
               float*) const {}

#endif

void Conv::pack(const float* weights, float* packed) const {
  // U = G g G^T per (k, c), in double so the packed weights carry no more rounding than the fp32 result
  static const double G4[6][3] = {{1.0 / 4, 0, 0},
                                  {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                  {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                  {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                  {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                  {0, 0, 1}};
  static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  const int patch = tile + 2;
  const double(*G)[3] = tile == 2 ? G2 : G4;
  const int64_t Cc = C, Kk = K;
#pragma omp parallel for collapse(2)
  for (int64_t k = 0; k < Kk; ++k) {
    for (int64_t c = 0; c < Cc; ++c) {
      const float* g = weights + (k * Cc + c) * 9;
      double gg[6][3];
      for (int i = 0; i < patch; ++i)
        for (int j = 0; j < 3; ++j) gg[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
      for (int i = 0; i < patch; ++i)
        for (int j = 0; j < patch; ++j) {
          const double u = gg[i][0] * G[j][0] + gg[i][1] * G[j][1] + gg[i][2] * G[j][2];
          packed[((i * patch + j) * Cc + c) * Kk + k] = static_cast<float>(u);
        }
    }
  }
}

}  // namespace sol_winograd
