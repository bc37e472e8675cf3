// ---- cuBLAS / cuBLASLt / cuDNN calls (sol_backend_cuda.glue) ----
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cudnn.h>
#include <mutex>
#include <cstdio>

// Defined by sol_backend_cuda.glue before this text: SOL_LIBRARY_WORKSPACE (bytes of SOL's workspace the libraries
// may use), SOL_MATH_CONV_TF32 / SOL_MATH_MATMUL_TF32 (the math word's bits, sol.precision.Fp32Math: which fp32
// library calls may use TF32 tensor cores) and SOL_CUDA_AUTOTUNE (1: convolution algorithms are timed on the GPU at
// the first call of a batch size, sol.config["autotuning"]).
#if !defined(SOL_LIBRARY_WORKSPACE) || !defined(SOL_MATH_CONV_TF32) || !defined(SOL_MATH_MATMUL_TF32) || !defined(SOL_CUDA_AUTOTUNE)
#error "library_glue.cuh needs the definitions sol_backend_cuda.glue puts before it"
#endif
static cublasHandle_t sol_cublas = nullptr;
static cublasLtHandle_t sol_cublaslt = nullptr;
static cudnnHandle_t sol_cudnn = nullptr;
static std::mutex sol_dnn_lock;

static int sol_dnn_report(const char* layer, const char* call, const char* status) {
  fprintf(stderr, "SOL: %s failed for layer %s: %s\n", call, layer, status);
  return 1;
}
#define SOL_CUBLAS(layer, call) do { cublasStatus_t st_ = (call); if (st_ != CUBLAS_STATUS_SUCCESS) return sol_dnn_report(layer, #call, cublasGetStatusString(st_)); } while (0)
#define SOL_CUDNN(layer, call) do { cudnnStatus_t st_ = (call); if (st_ != CUDNN_STATUS_SUCCESS) return sol_dnn_report(layer, #call, cudnnGetErrorString(st_)); } while (0)

// The device address of a __device__ array (a constant of the model) for a library call made from host code.
template <class T> static const void* sol_device_address(const T& symbol) {
  void* address = nullptr;
  return cudaGetSymbolAddress(&address, symbol) == cudaSuccess ? address : nullptr;
}

// The handles, once per module, on the calling thread's current device (the framework's).
static int sol_dnn_init(void) {
  std::lock_guard<std::mutex> guard(sol_dnn_lock);
  if (!sol_cublas) {
    SOL_CUBLAS("(init)", cublasCreate(&sol_cublas));
    // no TF32 from the handle: each GEMM names its compute type (sol_gemm_compute)
    SOL_CUBLAS("(init)", cublasSetMathMode(sol_cublas, CUBLAS_DEFAULT_MATH));
  }
  if (!sol_cublaslt) SOL_CUBLAS("(init)", cublasLtCreate(&sol_cublaslt));
  if (!sol_cudnn) SOL_CUDNN("(init)", cudnnCreate(&sol_cudnn));
  return 0;
}

// The compute type of an fp32 matrix product under the call's math word (PyTorch's matmul TF32 setting).
static inline cublasComputeType_t sol_gemm_compute(int fp32_math) {
  return (fp32_math & SOL_MATH_MATMUL_TF32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// ---- GEMM: C (m x n, column-major) = op(A) op(B), batch times with element strides (sol_backend_cuda.blas).
static int sol_gemm(const char* layer, cudaStream_t stream, void* workspace, int fp32_math, int trans_a, int trans_b,
                    int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, int64_t stride_a,
                    const float* b, int64_t ldb, int64_t stride_b, float* c, int64_t ldc, int64_t stride_c,
                    int64_t batch) {
  const float one = 1.0f, zero = 0.0f;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasComputeType_t compute = sol_gemm_compute(fp32_math);
  std::lock_guard<std::mutex> guard(sol_dnn_lock);
  SOL_CUBLAS(layer, cublasSetStream(sol_cublas, stream));
  SOL_CUBLAS(layer, cublasSetWorkspace(sol_cublas, workspace, SOL_LIBRARY_WORKSPACE));
  if (batch == 1)
    SOL_CUBLAS(layer, cublasGemmEx_64(sol_cublas, op_a, op_b, m, n, k, &one, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb,
                                      &zero, c, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT));
  else
    SOL_CUBLAS(layer, cublasGemmStridedBatchedEx_64(sol_cublas, op_a, op_b, m, n, k, &one, a, CUDA_R_32F, lda,
                                                    stride_a, b, CUDA_R_32F, ldb, stride_b, &zero, c, CUDA_R_32F, ldc,
                                                    stride_c, batch, compute, CUBLAS_GEMM_DEFAULT));
  return 0;
}

// ---- Linear through cuBLASLt: C (m x n) = op(A) op(B) (+ bias per row) (relu), the bias and activation as the
// matmul's epilogue. The layouts are made once per batch size (rows n), the operation once per math mode (its
// compute type), the heuristic's algorithm once per batch size, math mode and alignment.
struct sol_lt_linear {
  cublasLtMatmulDesc_t op[2];  // [0]: CUBLAS_COMPUTE_32F, [1]: CUBLAS_COMPUTE_32F_FAST_TF32 (matmul TF32 allowed)
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo[2][2];  // [mode][0]: for 16-byte aligned pointers, [mode][1]: any (4-byte) alignment
  int have[2][2];
  int64_t rows_for;
};

static int sol_lt_algo(const char* layer, sol_lt_linear* s, int mode, int which) {
  cublasLtMatmulPreference_t pref;
  SOL_CUBLAS(layer, cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t bytes = SOL_LIBRARY_WORKSPACE;
  const uint32_t align = which == 0 ? 16 : 4;
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes);
  const cublasLtMatmulPreferenceAttributes_t aligns[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(sol_cublaslt, s->op[mode], s->a, s->b, s->c, s->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return sol_dnn_report(layer, "cublasLtMatmulAlgoGetHeuristic", cublasGetStatusString(st));
  if (found < 1) return sol_dnn_report(layer, "cublasLtMatmulAlgoGetHeuristic", "no algorithm for this matmul");
  s->algo[mode][which] = result.algo;
  s->have[mode][which] = 1;
  return 0;
}

// The operation of one math mode: transposes, epilogue and the compute type (made at its first call).
static int sol_lt_op(const char* layer, sol_lt_linear* s, int mode, int trans_a, int trans_b,
                     cublasLtEpilogue_t epilogue) {
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  SOL_CUBLAS(layer, cublasLtMatmulDescCreate(&s->op[mode], sol_gemm_compute(mode ? SOL_MATH_MATMUL_TF32 : 0),
                                             CUDA_R_32F));
  SOL_CUBLAS(layer, cublasLtMatmulDescSetAttribute(s->op[mode], CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  SOL_CUBLAS(layer, cublasLtMatmulDescSetAttribute(s->op[mode], CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  SOL_CUBLAS(layer, cublasLtMatmulDescSetAttribute(s->op[mode], CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                   sizeof epilogue));
  return 0;
}

// The matrix layouts of a batch size (rows n); the algorithms chosen for another one are dropped.
static int sol_lt_layouts(const char* layer, sol_lt_linear* s, int trans_a, int trans_b, int64_t m, int64_t n,
                          int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  if (s->a) {
    cublasLtMatrixLayoutDestroy(s->a); cublasLtMatrixLayoutDestroy(s->b); cublasLtMatrixLayoutDestroy(s->c);
    s->a = s->b = s->c = nullptr;
  }
  s->have[0][0] = s->have[0][1] = s->have[1][0] = s->have[1][1] = 0;
  // the stored matrices: op(A) is m x k, so A is k x m when transposed; op(B) is k x n
  SOL_CUBLAS(layer, cublasLtMatrixLayoutCreate(&s->a, CUDA_R_32F, trans_a ? k : m, trans_a ? m : k, lda));
  SOL_CUBLAS(layer, cublasLtMatrixLayoutCreate(&s->b, CUDA_R_32F, trans_b ? n : k, trans_b ? k : n, ldb));
  SOL_CUBLAS(layer, cublasLtMatrixLayoutCreate(&s->c, CUDA_R_32F, m, n, ldc));
  s->rows_for = n;
  return 0;
}

static int sol_lt_run(const char* layer, sol_lt_linear* s, cudaStream_t stream, void* workspace, int fp32_math,
                      int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                      cublasLtEpilogue_t epilogue, const float* a, const float* b, const float* bias, float* c) {
  const float one = 1.0f, zero = 0.0f;
  const int mode = (fp32_math & SOL_MATH_MATMUL_TF32) ? 1 : 0;
  std::lock_guard<std::mutex> guard(sol_dnn_lock);
  if (!s->a || s->rows_for != n)
    if (sol_lt_layouts(layer, s, trans_a, trans_b, m, n, k, lda, ldb, ldc) != 0) return 1;
  if (!s->op[mode] && sol_lt_op(layer, s, mode, trans_a, trans_b, epilogue) != 0) return 1;
  const uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)bias;
  const int which = (any % 16 == 0) ? 0 : 1;
  if (!s->have[mode][which] && sol_lt_algo(layer, s, mode, which) != 0) return 1;
  if (bias)
    SOL_CUBLAS(layer, cublasLtMatmulDescSetAttribute(s->op[mode], CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                     sizeof bias));
  SOL_CUBLAS(layer, cublasLtMatmul(sol_cublaslt, s->op[mode], &one, a, s->a, b, s->b, &zero, c, s->c, c, s->c,
                                   &s->algo[mode][which], workspace, SOL_LIBRARY_WORKSPACE, stream));
  return 0;
}

// ---- Convolutions through cuDNN's legacy API (sol_backend_cuda.cudnn): forward, backward data, backward filter.
enum { SOL_CONV_FORWARD = 0, SOL_CONV_BACKWARD_DATA = 1, SOL_CONV_BACKWARD_FILTER = 2 };
// The tensor descriptors are the batch size's; the convolution descriptor, its math type and the algorithm are
// kept per math mode ([0]: fp32 in fp32, [1]: TF32 allowed), each set up at the mode's first call of a batch size.
struct sol_cudnn_conv {
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t w;
  cudnnActivationDescriptor_t relu;
  cudnnConvolutionDescriptor_t conv[2];
  int algo[2];
  size_t workspace[2];
  int ready[2];  // algo[mode] is chosen for n_for
  int64_t n_for;
};

// The math type a mode's descriptor searches with (PyTorch's: CUDNN_TENSOR_OP_MATH iff TF32 is allowed).
static inline cudnnMathType_t sol_conv_math(int mode) { return mode ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH; }
// Whether an algorithm cuDNN offers runs in a mode: strict fp32 only as CUDNN_FMA_MATH (on Ampere and later,
// CUDNN_DEFAULT_MATH permits TF32), TF32 mode whatever cuDNN pairs with it.
static inline int sol_conv_math_ok(int mode, cudnnMathType_t math) { return mode || math == CUDNN_FMA_MATH; }

#if SOL_CUDA_AUTOTUNE
// The fastest of cudnnFind*Ex's timings (sorted, fastest first) that ran, fits the library workspace and computes in
// the mode; the descriptor takes the math type cuDNN timed it with.
template <class Perf> static void sol_conv_fastest(const Perf* perf, int found, sol_cudnn_conv* s, int mode) {
  for (int i = 0; i < found && s->algo[mode] < 0; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= SOL_LIBRARY_WORKSPACE &&
        sol_conv_math_ok(mode, perf[i].mathType) &&
        cudnnSetConvolutionMathType(s->conv[mode], perf[i].mathType) == CUDNN_STATUS_SUCCESS) {
      s->algo[mode] = (int)perf[i].algo; s->workspace[mode] = perf[i].memory;
    }
}
#endif

// The descriptors of a batch size (made once; the tensors' reset for a new n, which drops every mode's algorithm).
static int sol_conv_describe(const char* layer, sol_cudnn_conv* s, int64_t n, int c, int h, int w, int k, int r,
                             int q_s, int groups, int p, int q) {
  if (!s->x) {
    SOL_CUDNN(layer, cudnnCreateTensorDescriptor(&s->x));
    SOL_CUDNN(layer, cudnnCreateTensorDescriptor(&s->y));
    SOL_CUDNN(layer, cudnnCreateTensorDescriptor(&s->bias));
    SOL_CUDNN(layer, cudnnCreateFilterDescriptor(&s->w));
    SOL_CUDNN(layer, cudnnCreateActivationDescriptor(&s->relu));
    SOL_CUDNN(layer, cudnnSetFilter4dDescriptor(s->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c / groups, r, q_s));
    SOL_CUDNN(layer, cudnnSetTensor4dDescriptor(s->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, k, 1, 1));
    SOL_CUDNN(layer, cudnnSetActivationDescriptor(s->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  s->ready[0] = s->ready[1] = 0;
  SOL_CUDNN(layer, cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n, c, h, w));
  SOL_CUDNN(layer, cudnnSetTensor4dDescriptor(s->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n, k, p, q));
  s->n_for = n;
  return 0;
}

// The algorithm of one math mode for the current batch size: timed (autotuning), else cuDNN's heuristics.
static int sol_conv_choose(const char* layer, sol_cudnn_conv* s, int kind, int mode, int64_t n, int k, int pad_h,
                           int pad_w, int stride_h, int stride_w, int dil_h, int dil_w, int groups, int p, int q,
                           const void* first, const void* second, void* out, void* workspace) {
  if (!s->conv[mode]) {
    SOL_CUDNN(layer, cudnnCreateConvolutionDescriptor(&s->conv[mode]));
    SOL_CUDNN(layer, cudnnSetConvolution2dDescriptor(s->conv[mode], pad_h, pad_w, stride_h, stride_w, dil_h, dil_w,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    SOL_CUDNN(layer, cudnnSetConvolutionGroupCount(s->conv[mode], groups));
  }
  cudnnConvolutionDescriptor_t conv = s->conv[mode];
  SOL_CUDNN(layer, cudnnSetConvolutionMathType(conv, sol_conv_math(mode)));  // what the search may offer
  int on = 0, oc = 0, oh = 0, ow = 0;
  SOL_CUDNN(layer, cudnnGetConvolution2dForwardOutputDim(conv, s->x, s->w, &on, &oc, &oh, &ow));
  if (on != (int)n || oc != k || oh != p || ow != q) {
    fprintf(stderr, "SOL: cuDNN computes a %dx%dx%dx%d output for layer %s, SOL planned %lldx%dx%dx%d\n", on, oc,
            oh, ow, layer, (long long)n, k, p, q);
    return 1;
  }
  int found = 0;
  s->algo[mode] = -1;
#if SOL_CUDA_AUTOTUNE
  // autotuning: cudnnFind*Ex times every algorithm that fits the workspace on the call's own buffers (first,
  // second: the call's inputs, out: its output, which the call then computes again), fastest first, in this mode's
  // math type. It waits for the GPU, so only the first call of a batch size and mode synchronises; a failed search
  // leaves the heuristics' choice.
  if (kind == SOL_CONV_FORWARD) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (cudnnFindConvolutionForwardAlgorithmEx(sol_cudnn, s->x, first, s->w, second, conv, s->y, out,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf, workspace,
                                               SOL_LIBRARY_WORKSPACE) == CUDNN_STATUS_SUCCESS)
      sol_conv_fastest(perf, found, s, mode);
  } else if (kind == SOL_CONV_BACKWARD_DATA) {  // first: dy, second: the filter, out: dx
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    if (cudnnFindConvolutionBackwardDataAlgorithmEx(sol_cudnn, s->w, second, s->y, first, conv, s->x, out,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf, workspace,
                                                    SOL_LIBRARY_WORKSPACE) == CUDNN_STATUS_SUCCESS)
      sol_conv_fastest(perf, found, s, mode);
  } else {  // first: x, second: dy, out: dw
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    if (cudnnFindConvolutionBackwardFilterAlgorithmEx(sol_cudnn, s->x, first, s->y, second, conv, s->w, out,
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf,
                                                      workspace, SOL_LIBRARY_WORKSPACE) == CUDNN_STATUS_SUCCESS)
      sol_conv_fastest(perf, found, s, mode);
  }
#else
  (void)first; (void)second; (void)out; (void)workspace;
#endif
  // otherwise the heuristics' ranking, fastest first; the first in the mode that succeeds within the workspace is
  // taken, its workspace asked for with the math type it comes with (which the descriptor keeps)
  if (s->algo[mode] < 0) {
    if (kind == SOL_CONV_FORWARD) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      SOL_CUDNN(layer, cudnnGetConvolutionForwardAlgorithm_v7(sol_cudnn, s->x, s->w, conv, s->y,
                                                              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
      for (int i = 0; i < found && s->algo[mode] < 0; ++i) {
        size_t bytes = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !sol_conv_math_ok(mode, perf[i].mathType)) continue;
        if (cudnnSetConvolutionMathType(conv, perf[i].mathType) != CUDNN_STATUS_SUCCESS ||
            cudnnGetConvolutionForwardWorkspaceSize(sol_cudnn, s->x, s->w, conv, s->y, perf[i].algo, &bytes)
            != CUDNN_STATUS_SUCCESS || bytes > SOL_LIBRARY_WORKSPACE) continue;
        s->algo[mode] = (int)perf[i].algo; s->workspace[mode] = bytes;
      }
    } else if (kind == SOL_CONV_BACKWARD_DATA) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      SOL_CUDNN(layer, cudnnGetConvolutionBackwardDataAlgorithm_v7(sol_cudnn, s->w, s->y, conv, s->x,
                                                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf));
      for (int i = 0; i < found && s->algo[mode] < 0; ++i) {
        size_t bytes = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !sol_conv_math_ok(mode, perf[i].mathType)) continue;
        if (cudnnSetConvolutionMathType(conv, perf[i].mathType) != CUDNN_STATUS_SUCCESS ||
            cudnnGetConvolutionBackwardDataWorkspaceSize(sol_cudnn, s->w, s->y, conv, s->x, perf[i].algo, &bytes)
            != CUDNN_STATUS_SUCCESS || bytes > SOL_LIBRARY_WORKSPACE) continue;
        s->algo[mode] = (int)perf[i].algo; s->workspace[mode] = bytes;
      }
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      SOL_CUDNN(layer, cudnnGetConvolutionBackwardFilterAlgorithm_v7(sol_cudnn, s->x, s->y, conv, s->w,
                                                                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf));
      for (int i = 0; i < found && s->algo[mode] < 0; ++i) {
        size_t bytes = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !sol_conv_math_ok(mode, perf[i].mathType)) continue;
        if (cudnnSetConvolutionMathType(conv, perf[i].mathType) != CUDNN_STATUS_SUCCESS ||
            cudnnGetConvolutionBackwardFilterWorkspaceSize(sol_cudnn, s->x, s->y, conv, s->w, perf[i].algo, &bytes)
            != CUDNN_STATUS_SUCCESS || bytes > SOL_LIBRARY_WORKSPACE) continue;
        s->algo[mode] = (int)perf[i].algo; s->workspace[mode] = bytes;
      }
    }
  }
  if (s->algo[mode] < 0)
    return sol_dnn_report(layer, "choosing a cuDNN algorithm", mode ? "none fits the library workspace"
                          : "none computes fp32 in fp32 (CUDNN_FMA_MATH) within the library workspace");
  s->ready[mode] = 1;
  return 0;
}

// forward: y = conv(x, w) (+ bias) (relu); backward data: x <- dx from y <- dy; backward filter: w <- dw.
static int sol_conv_run(const char* layer, sol_cudnn_conv* s, int kind, cudaStream_t stream, void* workspace,
                        int fp32_math, int64_t n, int c, int h, int w, int k, int r, int q_s, int pad_h, int pad_w,
                        int stride_h, int stride_w, int dil_h, int dil_w, int groups, int p, int q, int relu,
                        const float* x_or_dy, const float* w_or_dy, const float* bias, float* out) {
  const float one = 1.0f, zero = 0.0f;
  const int mode = (fp32_math & SOL_MATH_CONV_TF32) ? 1 : 0;
  std::lock_guard<std::mutex> guard(sol_dnn_lock);
  SOL_CUDNN(layer, cudnnSetStream(sol_cudnn, stream));  // before the setup: autotuning runs on the call's stream
  if (!s->x || s->n_for != n)
    if (sol_conv_describe(layer, s, n, c, h, w, k, r, q_s, groups, p, q) != 0) return 1;
  if (!s->ready[mode])
    if (sol_conv_choose(layer, s, kind, mode, n, k, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups, p, q,
                        x_or_dy, w_or_dy, out, workspace) != 0) return 1;
  cudnnConvolutionDescriptor_t conv = s->conv[mode];
  if (kind == SOL_CONV_FORWARD) {  // x_or_dy: x, w_or_dy: the filter, out: y
    SOL_CUDNN(layer, cudnnConvolutionForward(sol_cudnn, &one, s->x, x_or_dy, s->w, w_or_dy, conv,
                                             (cudnnConvolutionFwdAlgo_t)s->algo[mode], workspace, s->workspace[mode],
                                             &zero, s->y, out));
    if (bias) SOL_CUDNN(layer, cudnnAddTensor(sol_cudnn, &one, s->bias, bias, &one, s->y, out));
    if (relu) SOL_CUDNN(layer, cudnnActivationForward(sol_cudnn, s->relu, &one, s->y, out, &zero, s->y, out));
  } else if (kind == SOL_CONV_BACKWARD_DATA) {  // x_or_dy: dy, w_or_dy: the filter, out: dx
    SOL_CUDNN(layer, cudnnConvolutionBackwardData(sol_cudnn, &one, s->w, w_or_dy, s->y, x_or_dy, conv,
                                                  (cudnnConvolutionBwdDataAlgo_t)s->algo[mode], workspace,
                                                  s->workspace[mode], &zero, s->x, out));
  } else {  // x_or_dy: x, w_or_dy: dy, out: dw
    SOL_CUDNN(layer, cudnnConvolutionBackwardFilter(sol_cudnn, &one, s->x, x_or_dy, s->y, w_or_dy, conv,
                                                    (cudnnConvolutionBwdFilterAlgo_t)s->algo[mode], workspace,
                                                    s->workspace[mode], &zero, s->w, out));
  }
  return 0;
}
