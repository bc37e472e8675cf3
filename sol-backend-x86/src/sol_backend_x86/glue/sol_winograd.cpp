// Winograd F(4x4, 3x3) and F(2x2, 3x3) for channels-last fp32 on AVX2/FMA: see sol_winograd.h for the method,
// and sol_backend_x86/winograd.py for which tile size runs where (F(4x4) only on request: its float32 error).
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
// run_blocks takes transformed weights up to this size (they stay in a core's L2). Measured against the phases
// (2 threads, warm): 1.1-1.2x on 55x55 16 -> 64, 27x27 32 -> 128, 13x13 32 -> 128; even on 56x56 64 -> 64;
// slower from 28x28 128 -> 128 (1 MiB) up.
constexpr int64_t kBlockedWeightBytes = 512 << 10;
// tiles per block in run_blocks (12 and 48 measured within a few percent of it)
constexpr int64_t kBlockRows = 24;

// Per-thread scratch of the calling thread: the transformed input and the GEMM results of one chunk.
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

// 1-D input transforms B^T d (the rows of B^T: Lavin & Gray), F(4,3) on six vectors and F(2,3) on four.
template <int T>
SOL_AVX2 inline void input_1d(const __m256* d, __m256* r);

template <>
SOL_AVX2 inline void input_1d<4>(const __m256* d, __m256* r) {
  const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
  r[0] = _mm256_add_ps(_mm256_fnmadd_ps(five, d[2], _mm256_mul_ps(four, d[0])), d[4]);
  const __m256 a = _mm256_fnmadd_ps(four, d[2], d[4]);  // d4 - 4 d2
  const __m256 b = _mm256_fnmadd_ps(four, d[1], d[3]);  // d3 - 4 d1
  r[1] = _mm256_add_ps(a, b);
  r[2] = _mm256_sub_ps(a, b);
  const __m256 c = _mm256_sub_ps(d[4], d[2]);                      // d4 - d2
  const __m256 e = _mm256_mul_ps(two, _mm256_sub_ps(d[3], d[1]));  // 2 (d3 - d1)
  r[3] = _mm256_add_ps(c, e);
  r[4] = _mm256_sub_ps(c, e);
  r[5] = _mm256_add_ps(_mm256_fnmadd_ps(five, d[3], _mm256_mul_ps(four, d[1])), d[5]);
}

template <>
SOL_AVX2 inline void input_1d<2>(const __m256* d, __m256* r) {
  r[0] = _mm256_sub_ps(d[0], d[2]);
  r[1] = _mm256_add_ps(d[1], d[2]);
  r[2] = _mm256_sub_ps(d[2], d[1]);
  r[3] = _mm256_sub_ps(d[1], d[3]);
}

// 1-D output transforms A^T m: six vectors -> four (F(4,3)), four -> two (F(2,3)).
template <int T>
SOL_AVX2 inline void output_1d(const __m256* m, __m256* o);

template <>
SOL_AVX2 inline void output_1d<4>(const __m256* m, __m256* o) {
  const __m256 a = _mm256_add_ps(m[1], m[2]), b = _mm256_sub_ps(m[1], m[2]);
  const __m256 c = _mm256_add_ps(m[3], m[4]), e = _mm256_sub_ps(m[3], m[4]);
  o[0] = _mm256_add_ps(_mm256_add_ps(m[0], a), c);
  o[1] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), e, b);
  o[2] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), c, a);
  o[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), e, b), m[5]);
}

template <>
SOL_AVX2 inline void output_1d<2>(const __m256* m, __m256* o) {
  o[0] = _mm256_add_ps(_mm256_add_ps(m[0], m[1]), m[2]);
  o[1] = _mm256_sub_ps(_mm256_sub_ps(m[1], m[2]), m[3]);
}

SOL_AVX2 inline __m256i lane_mask(int64_t lanes) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)), index);
}

// Loads the kPatch x kPatch input patch at (y0, x0) for channels [c, c + 8) (lanes of them, by `mask` where
// PARTIAL), zero outside the image unless INSIDE (the patch lies in it: no test per pixel).
template <int T, bool INSIDE, bool PARTIAL>
SOL_AVX2 inline void load_patch(const Geometry& g, const float* image, int64_t y0, int64_t x0, int64_t c,
                                __m256i mask, __m256 (&d)[Tile<T>::kPatch][Tile<T>::kPatch]) {
  constexpr int kPatch = Tile<T>::kPatch;
  SOL_UNROLL
  for (int i = 0; i < kPatch; ++i) {
    SOL_UNROLL
    for (int j = 0; j < kPatch; ++j) {
      const int64_t yy = y0 + i, xx = x0 + j;
      if (INSIDE || (yy >= 0 && yy < g.H && xx >= 0 && xx < g.W)) {
        const float* p = image + (yy * g.W + xx) * g.C + c;
        d[i][j] = PARTIAL ? _mm256_maskload_ps(p, mask) : _mm256_loadu_ps(p);
      } else {
        d[i][j] = _mm256_setzero_ps();
      }
    }
  }
}

// B^T d B of one patch, stored to its kPoints rows of V (row `row` of a chunk of `chunk` tiles).
template <int T, bool PARTIAL>
SOL_AVX2 inline void transform_patch(__m256 (&d)[Tile<T>::kPatch][Tile<T>::kPatch], float* V, int64_t chunk,
                                     int64_t row, int64_t C, int64_t c, __m256i mask) {
  constexpr int kPatch = Tile<T>::kPatch;
  __m256 tmp[kPatch][kPatch];
  SOL_UNROLL
  for (int j = 0; j < kPatch; ++j) {  // B^T d along the columns
    __m256 column[kPatch], out[kPatch];
    SOL_UNROLL
    for (int i = 0; i < kPatch; ++i) column[i] = d[i][j];
    input_1d<T>(column, out);
    SOL_UNROLL
    for (int i = 0; i < kPatch; ++i) tmp[i][j] = out[i];
  }
  SOL_UNROLL
  for (int i = 0; i < kPatch; ++i) {  // then (B^T d) B along the rows
    __m256 out[kPatch];
    input_1d<T>(tmp[i], out);
    SOL_UNROLL
    for (int j = 0; j < kPatch; ++j) {
      float* dst = V + ((i * kPatch + j) * chunk + row) * C + c;
      if (PARTIAL) _mm256_maskstore_ps(dst, mask, out[j]);
      else _mm256_storeu_ps(dst, out[j]);
    }
  }
}

template <int T, bool INSIDE>
SOL_AVX2 inline void input_channels(const Geometry& g, const float* image, int64_t y0, int64_t x0, int64_t row,
                                    int64_t chunk, float* V) {
  constexpr int kPatch = Tile<T>::kPatch;
  __m256 d[kPatch][kPatch];
  const int64_t full = g.C / 8 * 8;
  for (int64_t c = 0; c < full; c += 8) {  // compile-time loops: the patch stays in registers
    load_patch<T, INSIDE, false>(g, image, y0, x0, c, __m256i(), d);
    transform_patch<T, false>(d, V, chunk, row, g.C, c, __m256i());
  }
  if (full < g.C) {
    const __m256i mask = lane_mask(g.C - full);
    load_patch<T, INSIDE, true>(g, image, y0, x0, full, mask, d);
    transform_patch<T, true>(d, V, chunk, row, g.C, full, mask);
  }
}

// Transforms tile `t` (global index) into V (row `row` of the chunk), every channel.
template <int T>
SOL_AVX2 void input_tile(const Geometry& g, const Conv& conv, const float* x, int64_t t, int64_t row,
                         int64_t chunk, float* V) {
  constexpr int kTile = Tile<T>::kTile, kPatch = Tile<T>::kPatch;
  const int64_t n = t / (g.tiles_h * g.tiles_w), rest = t % (g.tiles_h * g.tiles_w);
  const int64_t y0 = rest / g.tiles_w * kTile - conv.pad_t, x0 = rest % g.tiles_w * kTile - conv.pad_l;
  const float* image = x + n * g.H * g.W * g.C;
  if (y0 >= 0 && x0 >= 0 && y0 + kPatch <= g.H && x0 + kPatch <= g.W)
    input_channels<T, true>(g, image, y0, x0, row, chunk, V);
  else
    input_channels<T, false>(g, image, y0, x0, row, chunk, V);
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

// Tile `t` (global), row `row` of the chunk: M -> T x T outputs for every output channel, into y. Interior tiles
// (all T x T outputs inside the image, the usual case) keep every value in registers: compile-time loop bounds,
// the bias and each post-op applied to a row of T outputs at once.
template <int T>
SOL_AVX2 void output_tile(const Geometry& g, const Conv& conv, const float* M, int64_t t, int64_t row,
                          int64_t chunk, const float* bias, const void* const* post_src, float* y) {
  constexpr int kTile = Tile<T>::kTile, kPatch = Tile<T>::kPatch;
  const int64_t n = t / (g.tiles_h * g.tiles_w), rest = t % (g.tiles_h * g.tiles_w);
  const int64_t y0 = rest / g.tiles_w * kTile, x0 = rest % g.tiles_w * kTile;
  const int rows = static_cast<int>(std::min<int64_t>(kTile, g.Ho - y0));
  const int cols = static_cast<int>(std::min<int64_t>(kTile, g.Wo - x0));
  const bool whole = rows == kTile && cols == kTile;
  for (int64_t k = 0; k < g.K; k += 8) {
    __m256 tmp[kTile][kPatch];
    SOL_UNROLL
    for (int j = 0; j < kPatch; ++j) {  // A^T m along the columns
      __m256 column[kPatch], out[kTile];
      SOL_UNROLL
      for (int i = 0; i < kPatch; ++i) column[i] = _mm256_loadu_ps(M + ((i * kPatch + j) * chunk + row) * g.K + k);
      output_1d<T>(column, out);
      SOL_UNROLL
      for (int i = 0; i < kTile; ++i) tmp[i][j] = out[i];
    }
    if (whole) {
      const __m256 b = bias ? _mm256_loadu_ps(bias + k) : _mm256_setzero_ps();
      SOL_UNROLL
      for (int i = 0; i < kTile; ++i) {  // then along the rows
        __m256 out[kTile];
        output_1d<T>(tmp[i], out);
        SOL_UNROLL
        for (int j = 0; j < kTile; ++j) out[j] = _mm256_add_ps(out[j], b);
        const int64_t at = ((n * g.Ho + y0 + i) * g.Wo + x0) * g.K + k;
        sol_kernels::post_ops<kTile>(conv.post, out, post_src, at, g.K, k);
        SOL_UNROLL
        for (int j = 0; j < kTile; ++j) _mm256_storeu_ps(y + at + j * g.K, out[j]);
      }
      continue;
    }
    for (int i = 0; i < rows; ++i) {  // an edge tile: only what lies inside the output
      __m256 out[kTile];
      output_1d<T>(tmp[i], out);
      for (int j = 0; j < cols; ++j) {
        const int64_t at = ((n * g.Ho + y0 + i) * g.Wo + x0 + j) * g.K + k;
        _mm256_storeu_ps(y + at, sol_kernels::epilogue(conv.post, out[j], bias, post_src, at, k));
      }
    }
  }
}

// One GEMM block of a transform point: M[rows x K] = V[rows x C] * U[C x K] in column blocks of the micro-kernel.
inline void gemm_point(bool wide, int64_t rows_total, const float* v, const float* u, float* m, int64_t C,
                       int64_t K) {
  const int64_t cols = wide ? kWideCols : kCols;
  for (int64_t cb = 0; cb < K; cb += cols) {
    const int64_t width = std::min(cols, K - cb);
    for (int64_t r = 0; r < rows_total; r += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, rows_total - r));
      if (wide) gemm_wide(rows, width, v + r * C, C, u + cb, K, C, m + r * K + cb, K);
      else gemm_narrow(rows, width, v + r * C, C, u + cb, K, C, m + r * K + cb, K);
    }
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
      for (int64_t r = 0; r < count; ++r) input_tile<T>(g, conv, x, first + r, r, block, V);
      for (int p = 0; p < kPoints; ++p)
        gemm_point(wide, count, V + p * block * C, packed + p * C * K, M + p * block * K, C, K);
      for (int64_t r = 0; r < count; ++r) output_tile<T>(g, conv, M, first + r, r, block, bias, post_src, y);
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
    for (int64_t r = 0; r < count; ++r) input_tile<T>(g, conv, x, first + r, r, chunk, V);
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
          const float* u = packed + p * C * K + cb * cols;
          const float* v = V + p * chunk * C;
          float* m = M + p * chunk * K + cb * cols;
          const int64_t width = std::min(cols, K - cb * cols);
          const int64_t lo = part * groups / row_split * kRows, hi = std::min(count, (part + 1) * groups / row_split * kRows);
          for (int64_t r = lo; r < hi; r += kRows) {
            const int rows = static_cast<int>(std::min<int64_t>(kRows, hi - r));
            if (wide) gemm_wide(rows, width, v + r * C, C, u, K, C, m + r * K, K);
            else gemm_narrow(rows, width, v + r * C, C, u, K, C, m + r * K, K);
          }
        }
      }
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < count; ++r) output_tile<T>(g, conv, M, first + r, r, chunk, b, post_src, y);
  }
}

template <int T>
void run_tiles(const Conv& conv, int64_t N, int64_t H, int64_t W, const float* x, const float* packed,
               const float* bias, const void* const* post_src, float* y) {
  const Geometry g = geometry<T>(conv, N, H, W);
  const float* b = conv.has_bias ? bias : nullptr;
  const int64_t u_bytes = int64_t{Tile<T>::kPoints} * g.C * g.K * 4;
  if (u_bytes <= kBlockedWeightBytes) run_blocks<T>(conv, g, x, packed, b, post_src, y);
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
