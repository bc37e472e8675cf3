// Linear layers on MKL's packed GEMM (see sol_blas.h).
#include "sol_blas.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <omp.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace sol_blas {

namespace {

// mkl_cblas.h / mkl_service.h
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, PACKED = 151, B_MATRIX = 162, THREADING_SEQUENTIAL = 1 };

// One post-op as the epilogue applies it to a row of the output.
struct Step {
  int kind = SOL_DNNL_ELTWISE, alg = 0;
  float alpha = 0, beta = 0;
  int binary = -1;  // BINARY: which post_src operand
};

// How a binary operand of dims [rows or 1, cols or 1] (1-d: [cols or 1]) maps onto an output of rows x cols.
struct Broadcast {
  bool per_row = false, per_col = false;  // whether it varies along the rows / the columns
  bool valid = false;
};

Broadcast broadcast_of(const sol_dnnl_tensor& t, int64_t rows, int64_t cols) {
  Broadcast b;
  if (t.type != SOL_DNNL_F32 || t.ndims > 2 || (t.ndims == 2 && t.order[0] != 0)) return b;  // rows outermost
  const int64_t t_rows = t.ndims == 2 ? t.dims[0] : 1, t_cols = t.ndims >= 1 ? t.dims[t.ndims - 1] : 1;
  b.valid = (t_rows == rows || t_rows == 1) && (t_cols == cols || t_cols == 1);
  b.per_row = t_rows == rows && rows != 1;
  b.per_col = t_cols == cols && cols != 1;
  return b;
}

bool supported_eltwise(int alg) {
  return alg == SOL_DNNL_RELU || alg == SOL_DNNL_CLIP || alg == SOL_DNNL_LINEAR || alg == SOL_DNNL_GELU_ERF ||
         alg == SOL_DNNL_GELU_TANH;
}

float binary(int alg, float a, float b) {
  switch (alg) {
    case SOL_DNNL_MUL: return a * b;
    case SOL_DNNL_SUB: return a - b;
    case SOL_DNNL_DIV: return a / b;
    case SOL_DNNL_MAX: return std::max(a, b);
    case SOL_DNNL_MIN: return std::min(a, b);
    default: return a + b;
  }
}

// One output segment's operands: each binary post-op's values for it, and whether they vary along it (else one
// value broadcast).
struct Segment {
  float* y;
  int64_t n;
  const float* bias;  // null without bias
  const float* operand[SOL_DNNL_MAX_POST];
  bool varies[SOL_DNNL_MAX_POST];
};

// Bias and post-ops of one segment, one value at a time (CPUs without AVX-512).
void epilogue_scalar(const Segment& g, const std::vector<Step>& steps) {
  for (int64_t k = 0; k < g.n; ++k) {
    float v = g.y[k] + (g.bias ? g.bias[k] : 0.0f);
    for (const Step& s : steps) {
      if (s.kind == SOL_DNNL_BINARY) {
        v = binary(s.alg, v, g.operand[s.binary][g.varies[s.binary] ? k : 0]);
        continue;
      }
      switch (s.alg) {
        case SOL_DNNL_RELU: v = v > 0.0f ? v : v * s.alpha; break;
        case SOL_DNNL_CLIP: v = std::min(std::max(v, s.alpha), s.beta); break;
        case SOL_DNNL_LINEAR: v = s.alpha * v + s.beta; break;
        case SOL_DNNL_GELU_ERF: v = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); break;
        default: v = 0.5f * v * (1.0f + std::tanh(0.79788456080286536f * (v + 0.044715f * v * v * v))); break;
      }
    }
    g.y[k] = v;
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

SOL_AVX512 inline __m512 binary16(int alg, __m512 a, __m512 b) {
  switch (alg) {
    case SOL_DNNL_MUL: return _mm512_mul_ps(a, b);
    case SOL_DNNL_SUB: return _mm512_sub_ps(a, b);
    case SOL_DNNL_DIV: return _mm512_div_ps(a, b);
    case SOL_DNNL_MAX: return _mm512_max_ps(a, b);
    case SOL_DNNL_MIN: return _mm512_min_ps(a, b);
    default: return _mm512_add_ps(a, b);
  }
}

// The same in AVX-512 registers, 16 values at a time (the tail masked): one pass over the segment, as a fused
// post-op of a oneDNN primitive would be.
SOL_AVX512 void epilogue_avx512(const Segment& g, const std::vector<Step>& steps) {
  for (int64_t k = 0; k < g.n; k += 16) {
    const __mmask16 m = g.n - k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (g.n - k)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, g.y + k);
    if (g.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, g.bias + k));
    for (const Step& s : steps) {
      if (s.kind == SOL_DNNL_BINARY) {
        const float* o = g.operand[s.binary];
        v = binary16(s.alg, v, g.varies[s.binary] ? _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, o + k)
                                                  : _mm512_set1_ps(o[0]));
        continue;
      }
      v = sol_kernels::eltwise16(s.alg, s.alpha, s.beta, v);
    }
    _mm512_mask_storeu_ps(g.y + k, m, v);
  }
}
#else
void epilogue_avx512(const Segment& g, const std::vector<Step>& steps) { epilogue_scalar(g, steps); }
#endif

// The weights are packed as column blocks, one per thread, each MKL's packed matrix of its own (64-byte aligned):
// every thread multiplies all rows by its block with MKL's sequential GEMM and runs the epilogue on its part of
// the output while that is in its caches. SOL's threads do the splitting, not MKL's threading layer: with MKL's
// GNU OpenMP layer in the same libgomp pool as oneDNN's and the generated code's regions, BERT-base took 1.2 s
// instead of 63 ms, its threads spinning in libgomp against each other.
class Linear final : public sol_kernels::Kernel {
 public:
  Linear(int64_t rows, int64_t in, int64_t out, bool has_bias, std::vector<Step> post)
      : M(rows), C(in), K(out), bias(has_bias), steps(std::move(post)) {
    // blocks of at least 64 columns, as many as threads (a multiple of 16 wide: whole AVX-512 registers)
    const int64_t threads = std::max(1, omp_get_max_threads());
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, K / 64));
    const int64_t width = (K + blocks - 1) / blocks;
    int64_t offset = 0;
    for (int64_t k0 = 0; k0 < K;) {
      const int64_t k1 = std::min(K, (k0 + width + 15) / 16 * 16);
      block_columns.push_back({k0, k1 - k0});
      block_offsets.push_back(offset);
      const size_t bytes = cblas_sgemm_pack_get_size(B_MATRIX, M, k1 - k0, C);
      offset += static_cast<int64_t>((bytes + 63) / 64 * 16);  // floats, each block 64-byte aligned
      k0 = k1;
    }
    floats = offset + 16;  // room to align the buffer's start
  }
  const char* name() const override { return "gemm_packed:mkl"; }
  int64_t packed_floats() const override { return floats; }
  // Packed for the creation batch's rows: MKL picks its packed layout by m (packed for one row, 128-row GEMMs ran
  // 20% slower), though any number of rows can use it.
  void pack(const float* weights, float* packed) const override {
    float* base = aligned(packed);
    for (size_t j = 0; j < block_columns.size(); ++j)
      cblas_sgemm_pack(ROW_MAJOR, B_MATRIX, TRANS, M, block_columns[j].second, C, 1.0f,
                       weights + block_columns[j].first * C, C, base + block_offsets[j]);
  }
  void execute(const sol_dnnl_desc& d, const float* x, const float* packed, const float* b,
               const void* const* post_src, float* y) const override {
    const int64_t rows = d.src.dims[0];
    const float* base = aligned(const_cast<float*>(packed));
    std::vector<Broadcast> operands;  // the binary operands' shapes at this batch size
    for (int i = 0; i < d.npost; ++i)
      if (d.post[i].kind == SOL_DNNL_BINARY) operands.push_back(broadcast_of(d.post[i].src1, rows, K));
    const int64_t blocks = static_cast<int64_t>(block_columns.size());
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < blocks; ++j) {
      const int64_t k0 = block_columns[j].first, width = block_columns[j].second;
      cblas_sgemm_compute(ROW_MAJOR, NO_TRANS, PACKED, rows, width, C, x, C, base + block_offsets[j], C, 0.0f,
                          y + k0, K);
      if (!bias && steps.empty()) continue;
      Segment g{};
      g.n = width;
      g.bias = bias ? b + k0 : nullptr;
      for (int64_t r = 0; r < rows; ++r) {
        g.y = y + r * K + k0;
        for (size_t i = 0; i < operands.size(); ++i) {
          const Broadcast& shape = operands[i];
          g.operand[i] = static_cast<const float*>(post_src[i]) + (shape.per_row ? r * (shape.per_col ? K : 1) : 0) +
                         (shape.per_col ? k0 : 0);
          g.varies[i] = shape.per_col;
        }
        if (avx512) epilogue_avx512(g, steps);
        else epilogue_scalar(g, steps);
      }
    }
  }

 private:
  static float* aligned(float* p) {
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~static_cast<uintptr_t>(63));
  }

  int64_t M, C, K;  // M: the creation batch's rows
  bool bias;
  std::vector<Step> steps;
  std::vector<std::pair<int64_t, int64_t>> block_columns;  // first column and width of each packed block
  std::vector<int64_t> block_offsets;                      // where each block lies in the packed buffer (floats)
  int64_t floats = 0;
  bool avx512 = sol_kernels::avx512_supported();  // the glue's own CPU check
};

}  // namespace

bool available() {
  if (!cblas_sgemm_pack_get_size || !cblas_sgemm_pack || !cblas_sgemm_compute || !MKL_Set_Threading_Layer)
    return false;
  static const bool layered = (MKL_Set_Threading_Layer(THREADING_SEQUENTIAL), true);
  return layered;
}

std::unique_ptr<sol_kernels::Kernel> linear_for(const sol_dnnl_desc& d) {
  auto plain = [](const sol_dnnl_tensor& t) { return t.ndims == 2 && t.order[0] == 0 && t.order[1] == 1; };
  if (d.op != SOL_DNNL_INNER_PRODUCT || d.algorithm != SOL_DNNL_LINEAR_BLAS || !d.static_weights ||
      d.precision != SOL_DNNL_F32 || d.src_scale || !plain(d.src) || !plain(d.dst) || !plain(d.weights) ||
      d.src.type != SOL_DNNL_F32 || d.dst.type != SOL_DNNL_F32 || !available())
    return nullptr;
  const int64_t M = d.src.dims[0], K = d.dst.dims[1];
  std::vector<Step> steps;
  int binary = 0;
  for (int i = 0; i < d.npost; ++i) {
    const sol_dnnl_post& p = d.post[i];
    Step s;
    s.kind = p.kind, s.alg = p.alg, s.alpha = p.alpha, s.beta = p.beta;
    if (p.kind == SOL_DNNL_BINARY) {
      if (!broadcast_of(p.src1, M, K).valid) return nullptr;
      s.binary = binary++;
    } else if (!supported_eltwise(p.alg)) {
      return nullptr;
    }
    steps.push_back(s);
  }
  return std::make_unique<Linear>(M, d.src.dims[1], K, d.has_bias != 0, std::move(steps));
}

}  // namespace sol_blas
