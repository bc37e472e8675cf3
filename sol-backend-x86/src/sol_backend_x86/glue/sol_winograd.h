/* Winograd F(4x4, 3x3) and F(2x2, 3x3) convolutions for channels-last fp32 tensors on AVX2/FMA (part of SOL's
 * oneDNN glue).
 *
 * oneDNN 3.2 has Winograd kernels only for AVX-512; on AVX2 its direct 3x3 kernels run near the cores' peak,
 * so the only way to be faster is to do fewer multiplications. F(4x4, 3x3) computes each 4x4 output tile
 * from a 6x6 input patch with 36 multiplications per (input, output) channel pair instead of 144:
 *
 *   Y = A^T [ (G g G^T) .* (B^T d B) ] A      (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks")
 *
 * A call runs three phases:
 *   1. input transform: each tile's 6x6 patch (zero outside the padded image) -> V[36][tiles][C]
 *   2. 36 GEMMs M[p] = V[p] (tiles x C) * U[p] (C x K), U the weights transformed once at pack time
 *   3. output transform: M -> 4x4 outputs, plus bias and the fused post-ops (activations, residual adds)
 * Two ways to split that work between the threads (the schedule):
 *   BLOCKS: each thread runs all three phases on its own share of the tiles, in blocks of up to 24 tiles, so V
 *     and M stay in its L1/L2 and the threads never wait for each other; each block reads all of U.
 *   PHASES: each phase runs with all threads over chunks of tiles (V and M of a chunk in about 4 MiB), so each
 *     thread reads only its share of U, but V and M pass between the cores through the L3.
 * Which is faster depends on the layer and on what the caches hold (see docs/x86.md), so the autotuner times
 * both; BY_WEIGHT_SIZE (autotuning off) takes BLOCKS up to 512 KiB of U, where U stays in a core's L2.
 *
 * F(2x2, 3x3) (16 multiplications per 2x2 tile instead of 36) has 4/9 of F(4x4)'s weights: it wins where those
 * stream from memory at every call (14x14 layers with 256 channels at batch 1).
 *
 * The transforms are exact in real arithmetic; in fp32 the result differs from a direct convolution by a
 * few ulps times the magnitude of the products (the transform coefficients are at most 8).
 *
 * On CPUs with AVX-512F the GEMMs (most of the time) run on 16-float registers, 6 tiles by 64 output channels
 * per micro-kernel call, and the transforms take 16 channels at a time.
 */
#ifndef SOL_WINOGRAD_H
#define SOL_WINOGRAD_H

#include <cstdint>
#include <vector>

#include "sol_kernels.h"

namespace sol_winograd {

struct Conv : sol_kernels::ConvKernel {
  enum Schedule { BY_WEIGHT_SIZE, BLOCKS, PHASES };
  int tile = 4;                          // output tile side: F(4x4, 3x3) or F(2x2, 3x3)
  Schedule schedule = BY_WEIGHT_SIZE;
  int64_t C = 0, K = 0;                  // input and output channels
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  bool has_bias = false;
  std::vector<sol_kernels::PostOp> post;  // applied by the output transform

  const char* name() const override {  // AVX-512 where the CPU has it
    if (sol_kernels::avx512_supported()) return tile == 2 ? "winograd_2x2_3x3:sol:avx512" : "winograd_4x4_3x3:sol:avx512";
    return tile == 2 ? "winograd_2x2_3x3:sol:avx2" : "winograd_4x4_3x3:sol:avx2";
  }
  int64_t packed_floats() const override { return (tile + 2) * (tile + 2) * C * K; }
  /* weights [K][C][3][3] -> U[(tile + 2)^2][C][K] */
  void pack(const float* weights, float* packed) const override;
  /* Ho = H + pad_t + pad_b - 2 */
  void run(int64_t N, int64_t H, int64_t W, const float* x, const float* packed, const float* bias,
           const void* const* post_src, float* y) const override;
};

}  // namespace sol_winograd

#endif
