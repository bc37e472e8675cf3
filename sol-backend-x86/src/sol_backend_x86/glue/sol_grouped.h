/* Grouped and depthwise convolutions for channels-last fp32 tensors on AVX2/FMA (part of SOL's oneDNN glue).
 *
 * oneDNN 3.2 runs a grouped convolution with few channels per group (ResNeXt's 32 groups of 4..32 channels,
 * RegNet's groups of 8) as im2col plus a GEMM per group on AVX2: about 5 GFLOP/s against 100+ for a dense
 * convolution. This kernel computes them directly, 8 output channels per AVX2 register:
 *
 *   - groups of 8k output channels ("broadcast" mode): the 8 lanes share one group, so each input channel
 *     is broadcast and multiplied with 8 output channels' weights;
 *   - groups of 1 or 4 output channels with as many input channels (depthwise and ResNeXt's first stage,
 *     "in-register" mode): the 8 lanes span 8/Kg groups whose input channels are the 8 channels at the same
 *     offset, loaded once per pixel and permuted per input channel of the group (no permute when depthwise).
 *
 * Each task is one output row of one 8-channel block; it keeps 8 output pixels in registers and walks the
 * kernel taps, so every weight vector loaded is used 8 times. Bias and the fused post-ops are applied before
 * the store (sol_kernels.h).
 */
#ifndef SOL_GROUPED_H
#define SOL_GROUPED_H

#include <cstdint>
#include <vector>

#include "sol_kernels.h"

namespace sol_grouped {

struct Conv : sol_kernels::ConvKernel {
  int64_t C = 0, K = 0, groups = 1;        // input and output channels (all groups)
  int64_t KH = 0, KW = 0, SH = 1, SW = 1;  // kernel and stride
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  bool has_bias = false;
  std::vector<sol_kernels::PostOp> post;

  /* Whether the kernel computes this grouping: K a multiple of 8 and groups of 8k output channels, or of 1 or 4
   * output channels with as many input channels. */
  static bool handles(int64_t C, int64_t K, int64_t groups);
  const char* name() const override { return "grouped_direct:sol:avx2"; }
  int64_t packed_floats() const override { return K * KH * KW * (C / groups); }
  /* weights [K][C/groups][KH][KW] -> [K/8][KH][KW][C/groups][8] */
  void pack(const float* weights, float* packed) const override;
  void run(int64_t N, int64_t H, int64_t W, const float* x, const float* packed, const float* bias,
           const void* const* post_src, float* y) const override;
};

}  // namespace sol_grouped

#endif
