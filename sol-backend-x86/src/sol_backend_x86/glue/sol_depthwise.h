/* Depthwise convolutions of bf16-stored channels-last tensors on AVX-512 (part of SOL's oneDNN glue).
 *
 * In a bf16 model (sol.precision) MobileNet's and EfficientNet's depthwise layers read and write bf16
 * activations. oneDNN 3.2 runs them with its jit_dw kernel, which takes 120 us for a 3x3 depthwise layer over
 * 56x56x144 on two AVX-512 cores where OpenVINO's brgconv_dw takes 89; this kernel takes about 70 (the numbers in
 * docs/precision.md). It computes in fp32 (bf16 inputs widen exactly), so its results are those of oneDNN's
 * up to the order of the additions:
 *
 *   - 32 channels per step: one 64-byte load of 32 bf16 channels is widened to two fp32 registers by
 *     interleaving it with zeros (one shuffle per 16 values, where a widening load costs two), so the two
 *     registers hold the channels in the order {0-3, 8-11, 16-19, 24-27} and {4-7, 12-15, 20-23, 28-31}. The
 *     weights are packed in that order, the bias is permuted into it once per step, and one permute puts the
 *     rounded results back in channel order before the store;
 *   - P output pixels of a row in registers: each input pixel of a kernel row is loaded once and multiplied
 *     into every output pixel whose window covers it (the common kernel widths and strides are compiled per case);
 *   - the eltwise post-ops run in fp32 before the one rounding to bf16 (sol_kernels::eltwise16).
 *
 * Any channel count (the last step masked), kernel size, stride and padding; no dilation, no binary post-ops.
 * Needs AVX-512BW and AVX512-BF16 (the CPUs SOL computes bf16 on); elsewhere the call stays with oneDNN.
 */
#ifndef SOL_DEPTHWISE_H
#define SOL_DEPTHWISE_H

#include <cstdint>
#include <memory>
#include <vector>

#include "sol_kernels.h"

namespace sol_depthwise {

/* One eltwise post-op (sol_dnnl.h's algorithm, alpha, beta). */
struct Activation {
  int alg = 0;
  float alpha = 0, beta = 0;
};

struct Conv : sol_kernels::Kernel {
  int64_t C = 0;                           // channels (= groups = output channels)
  int64_t KH = 0, KW = 0, SH = 1, SW = 1;  // kernel and stride
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  bool has_bias = false;
  std::vector<Activation> post;

  /* Whether the kernel runs this descriptor: a forward depthwise convolution of bf16-stored channels-last src and
   * dst with static weights, no dilation, eltwise post-ops eltwise16 computes, on a CPU with AVX-512BW and
   * AVX512-BF16. */
  static bool handles(const sol_dnnl_desc& d);
  static std::unique_ptr<Conv> for_desc(const sol_dnnl_desc& d);
  const char* name() const override { return "depthwise_direct:sol:avx512_bf16"; }
  /* [C/32 rounded up][KH][KW][32 in the interleaved order above], fp32 */
  int64_t packed_floats() const override { return (C + 31) / 32 * KH * KW * 32; }
  /* weights [C][1][1][KH][KW] (oneDNN's grouped order) */
  void pack(const float* weights, float* packed) const override;
  /* x, y: bf16 (the descriptor's src and dst types), passed as the Kernel interface's float pointers */
  void execute(const sol_dnnl_desc& d, const float* x, const float* packed, const float* bias,
               const void* const* post_src, float* y) const override;
};

}  // namespace sol_depthwise

#endif
