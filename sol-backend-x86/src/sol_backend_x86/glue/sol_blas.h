/* Linear layers on Intel MKL's packed single-precision GEMM (SOL_DNNL_LINEAR_BLAS in sol_dnnl.h).
 *
 * MKL packs a Linear's weights once into its own GEMM format (cblas_sgemm_pack) and then multiplies the layer's
 * rows by them (cblas_sgemm_compute). On BERT-base's layers (128 rows, 768 <-> 3072) that ran at 348-364 GFLOP/s
 * on two AVX-512 cores where oneDNN 3.2's inner product ran at 284-300 (the autotuner's timing, weights out of
 * the caches). The bias and the post-ops follow in one pass over each thread's part of the output, in AVX-512
 * registers where the CPU has them.
 *
 * MKL's symbols are weak: a model library that links libmkl_rt (the x86 flavour adds it where the `mkl` wheel is
 * installed, mkl.py) resolves them, one built without it (a deployed library) sees null pointers, and its Linear
 * layers then run oneDNN's inner product as they would without the choice. The prototypes are MKL's documented C
 * ABI (mkl_cblas.h, mkl_service.h; LP64 integers), declared here so the glue compiles
 * without MKL's headers.
 */
#ifndef SOL_BLAS_H
#define SOL_BLAS_H

#include <cstddef>
#include <memory>

#include "sol_kernels.h"

extern "C" {
size_t cblas_sgemm_pack_get_size(int identifier, int m, int n, int k) __attribute__((weak));
void cblas_sgemm_pack(int layout, int identifier, int trans, int m, int n, int k, float alpha, const float* src,
                      int ld, float* dest) __attribute__((weak));
void cblas_sgemm_compute(int layout, int transa, int transb, int m, int n, int k, const float* a, int lda,
                         const float* b, int ldb, float beta, float* c, int ldc) __attribute__((weak));
int MKL_Set_Threading_Layer(int code) __attribute__((weak));  // mkl_set_threading_layer in C
}

namespace sol_blas {

/* Whether the library was linked with MKL. The first call selects MKL's sequential layer (in the whole process):
 * SOL's own OpenMP threads split each GEMM (sol_blas.cpp says why). */
bool available();

/* MKL's Linear for an inner-product descriptor that asks for it (algorithm SOL_DNNL_LINEAR_BLAS), where MKL is
 * linked and computes the call as described: fp32 throughout, plain [M, C] x [K, C]^T with static weights, and
 * post-ops among relu/leaky relu, clip, linear, GELU (erf or tanh) and binary ops whose operand is [M or 1, K or
 * 1]. Otherwise null, and oneDNN's inner product runs it. */
std::unique_ptr<sol_kernels::Kernel> linear_for(const sol_dnnl_desc& d);

}  // namespace sol_blas

#endif
