// Stand-ins for the cuBLAS, cuBLASLt and cuDNN calls of sol_backend_cuda.glue, recording what the glue asks for, plus
// entry points that drive the glue's calls (tests without a GPU: test_cuda_fp32_math.py appends this file to the
// glue and builds it with nvcc against the wheels' headers, linking no NVIDIA library).
//
// Why stand-ins: which math type a convolution descriptor carries when it is searched and when it runs, which
// algorithms a mode may take, which compute type a GEMM names, are host-side decisions; a wrong one only shows on a
// GPU as a result off by TF32's rounding (or a speed gap), so the tests read them here instead.
//
// The fake cuDNN offers, for a descriptor searched with CUDNN_TENSOR_OP_MATH: algorithm 1 (tensor ops) first, then
// algorithm 0 (FMA); for CUDNN_FMA_MATH: algorithm 1 paired with CUDNN_DEFAULT_MATH (which permits TF32 on Ampere and
// later: strict fp32 must not take it), algorithm 2 (FMA) needing more workspace than SOL has, then algorithm 0 (FMA).
#include <cstring>
#include <string>

struct cudnnContext { int unused; };
struct cudnnTensorStruct { int n, c, h, w; };
struct cudnnFilterStruct { int k; };
struct cudnnActivationStruct { int unused; };
struct cudnnConvolutionStruct { cudnnMathType_t math; };
struct cublasContext { cublasMath_t math; };
struct cublasLtContext { int unused; };

static struct {
  int conv_descriptors, finds, gets, ran_algo, ran_math, searched_math, workspace_queries;
  size_t ran_workspace;
  int gemm_compute, gemm_batched, handle_math, lt_descriptors, lt_compute, heuristics, lt_heuristic_compute;
} sol_fake;

// ---- cuDNN
cudnnStatus_t cudnnCreate(cudnnHandle_t* h) { *h = new cudnnContext(); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) { return CUDNN_STATUS_SUCCESS; }
const char* cudnnGetErrorString(cudnnStatus_t) { return "fake cuDNN error"; }
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { *d = new cudnnTensorStruct(); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { *d = new cudnnFilterStruct(); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* d) { *d = new cudnnActivationStruct(); return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  *d = new cudnnConvolutionStruct{CUDNN_DEFAULT_MATH};  // cuDNN's default: TF32 permitted
  ++sol_fake.conv_descriptors;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t, cudnnTensorFormat_t, int k, int, int, int) {
  d->k = k;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t, cudnnDataType_t, int n, int c, int h, int w) {
  *d = cudnnTensorStruct{n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t, cudnnActivationMode_t, cudnnNanPropagation_t, double) {
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t, int, int, int, int, int, int, cudnnConvolutionMode_t,
                                              cudnnDataType_t) {
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t, int) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) { d->math = math; return CUDNN_STATUS_SUCCESS; }
// the harness's convolutions keep the size (3x3, padding 1, stride 1)
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w, int* n, int* c, int* h, int* wd) {
  *n = x->n; *c = w->k; *h = x->h; *wd = x->w;
  return CUDNN_STATUS_SUCCESS;
}

static size_t sol_fake_memory(int algo) { return algo == 2 ? ((size_t)1 << 40) : (algo == 1 ? 100 : 0); }

template <class Perf, class Algo> static void sol_fake_offer(const cudnnConvolutionStruct* conv, int* found, Perf* perf) {
  sol_fake.searched_math = conv->math;
  const bool tensor_ops = conv->math == CUDNN_TENSOR_OP_MATH;
  const int algos[3] = {1, 2, 0};
  const cudnnMathType_t maths[3] = {tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH, CUDNN_FMA_MATH};
  int count = 0;
  for (int i = 0; i < 3; ++i) {
    if (tensor_ops && algos[i] == 2) continue;
    memset(&perf[count], 0, sizeof perf[count]);
    perf[count].algo = (Algo)algos[i];
    perf[count].status = CUDNN_STATUS_SUCCESS;
    perf[count].memory = sol_fake_memory(algos[i]);
    perf[count].mathType = maths[i];
    ++count;
  }
  *found = count;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t, const cudnnTensorDescriptor_t, const void*, const cudnnFilterDescriptor_t,
                                                     const void*, const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t, void*,
                                                     const int, int* found, cudnnConvolutionFwdAlgoPerf_t* perf, void*, size_t) {
  ++sol_fake.finds;
  sol_fake_offer<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(conv, found, perf);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t, const cudnnFilterDescriptor_t, const void*, const cudnnTensorDescriptor_t,
                                                          const void*, const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t, void*,
                                                          const int, int* found, cudnnConvolutionBwdDataAlgoPerf_t* perf, void*, size_t) {
  ++sol_fake.finds;
  sol_fake_offer<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(conv, found, perf);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t, const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t,
                                                            const void*, const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t, void*,
                                                            const int, int* found, cudnnConvolutionBwdFilterAlgoPerf_t* perf, void*, size_t) {
  ++sol_fake.finds;
  sol_fake_offer<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(conv, found, perf);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,
                                                     const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t, const int,
                                                     int* found, cudnnConvolutionFwdAlgoPerf_t* perf) {
  ++sol_fake.gets;
  sol_fake_offer<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(conv, found, perf);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,
                                                          const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t, const int,
                                                          int* found, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  ++sol_fake.gets;
  sol_fake_offer<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(conv, found, perf);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
                                                            const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t, const int,
                                                            int* found, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  ++sol_fake.gets;
  sol_fake_offer<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(conv, found, perf);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,
                                                      const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
  ++sol_fake.workspace_queries;
  *bytes = sol_fake_memory((int)algo);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,
                                                           const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  ++sol_fake.workspace_queries;
  *bytes = sol_fake_memory((int)algo);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
                                                             const cudnnConvolutionDescriptor_t, const cudnnFilterDescriptor_t,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  ++sol_fake.workspace_queries;
  *bytes = sol_fake_memory((int)algo);
  return CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t sol_fake_ran(const cudnnConvolutionStruct* conv, int algo, size_t workspace) {
  sol_fake.ran_math = conv->math; sol_fake.ran_algo = algo; sol_fake.ran_workspace = workspace;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t, const void*, const cudnnFilterDescriptor_t,
                                      const void*, const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo, void*,
                                      size_t workspace, const void*, const cudnnTensorDescriptor_t, void*) {
  return sol_fake_ran(conv, (int)algo, workspace);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t, const void*, const cudnnFilterDescriptor_t, const void*, const cudnnTensorDescriptor_t,
                                           const void*, const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t algo, void*,
                                           size_t workspace, const void*, const cudnnTensorDescriptor_t, void*) {
  return sol_fake_ran(conv, (int)algo, workspace);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t,
                                             const void*, const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdFilterAlgo_t algo, void*,
                                             size_t workspace, const void*, const cudnnFilterDescriptor_t, void*) {
  return sol_fake_ran(conv, (int)algo, workspace);
}
cudnnStatus_t cudnnAddTensor(cudnnHandle_t, const void*, const cudnnTensorDescriptor_t, const void*, const void*, const cudnnTensorDescriptor_t,
                             void*) {
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnActivationForward(cudnnHandle_t, cudnnActivationDescriptor_t, const void*, const cudnnTensorDescriptor_t, const void*,
                                     const void*, const cudnnTensorDescriptor_t, void*) {
  return CUDNN_STATUS_SUCCESS;
}

// ---- cuBLAS
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) { *h = new cublasContext{CUBLAS_TF32_TENSOR_OP_MATH}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t math) { h->math = math; sol_fake.handle_math = math; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t) { return "fake cuBLAS error"; }
cublasStatus_t cublasGemmEx_64(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t, int64_t, const void*, const void*,
                               cudaDataType, int64_t, const void*, cudaDataType, int64_t, const void*, void*, cudaDataType, int64_t,
                               cublasComputeType_t compute, cublasGemmAlgo_t) {
  sol_fake.gemm_compute = compute; sol_fake.gemm_batched = 0;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t, int64_t, const void*,
                                             const void*, cudaDataType, int64_t, long long int, const void*, cudaDataType, int64_t,
                                             long long int, const void*, void*, cudaDataType, int64_t, long long int, int64_t,
                                             cublasComputeType_t compute, cublasGemmAlgo_t) {
  sol_fake.gemm_compute = compute; sol_fake.gemm_batched = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt: a descriptor's data[0] holds its compute type
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new cublasLtContext(); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = new cublasLtMatmulPreferenceOpaque_t(); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType, uint64_t, uint64_t, int64_t) {
  *l = new cublasLtMatrixLayoutOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t) {
  *d = new cublasLtMatmulDescOpaque_t();
  (*d)->data[0] = (uint64_t)compute;
  ++sol_fake.lt_descriptors;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                              cublasLtMatmulHeuristicResult_t results[], int* found) {
  ++sol_fake.heuristics;
  sol_fake.lt_heuristic_compute = (int)op->data[0];
  memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = op->data[0];  // the algorithm remembers the compute type it was chosen for
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t op, const void*, const void*, cublasLtMatrixLayout_t, const void*,
                              cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t) {
  if (algo->data[0] != op->data[0]) return CUBLAS_STATUS_INVALID_VALUE;  // an algorithm of the other mode
  sol_fake.lt_compute = (int)op->data[0];
  return CUBLAS_STATUS_SUCCESS;
}

// ---- what the tests call (through ctypes)
static sol_cudnn_conv sol_harness_convs[3];
static sol_lt_linear sol_harness_linear;
alignas(16) static float sol_harness_data[64];

extern "C" int harness_init(void) { return sol_dnn_init(); }

// One convolution call of ``kind`` (SOL_CONV_*): 3 -> 4 channels, 3x3, padding 1, 8x8 images, batch n.
extern "C" int harness_conv(int kind, int fp32_math, long long n) {
  float* d = sol_harness_data;
  return sol_conv_run("harness", &sol_harness_convs[kind], kind, nullptr, d, fp32_math, n, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1,
                      1, 1, 1, 8, 8, 0, d, d, nullptr, d);
}

// One Linear (16 -> 8 features, n rows) through cuBLASLt.
extern "C" int harness_linear(int fp32_math, long long n) {
  float* d = sol_harness_data;
  return sol_lt_run("harness", &sol_harness_linear, nullptr, d, fp32_math, 1, 0, 8, n, 16, 16, 16, 8,
                    CUBLASLT_EPILOGUE_BIAS, d, d, d, d);
}

// One cuBLAS GEMM (a batch of 1 or a strided batch).
extern "C" int harness_gemm(int fp32_math, long long batch) {
  float* d = sol_harness_data;
  return sol_gemm("harness", nullptr, d, fp32_math, 0, 0, 2, 2, 2, d, 2, 4, d, 2, 4, d, 2, 4, batch);
}

// A recorded value by name, and the library constants the tests compare with.
extern "C" long long harness_value(const char* name) {
  const std::string n(name);
  if (n == "conv_descriptors") return sol_fake.conv_descriptors;
  if (n == "finds") return sol_fake.finds;
  if (n == "gets") return sol_fake.gets;
  if (n == "searched_math") return sol_fake.searched_math;
  if (n == "ran_algo") return sol_fake.ran_algo;
  if (n == "ran_math") return sol_fake.ran_math;
  if (n == "ran_workspace") return (long long)sol_fake.ran_workspace;
  if (n == "gemm_compute") return sol_fake.gemm_compute;
  if (n == "gemm_batched") return sol_fake.gemm_batched;
  if (n == "handle_math") return sol_fake.handle_math;
  if (n == "lt_descriptors") return sol_fake.lt_descriptors;
  if (n == "lt_compute") return sol_fake.lt_compute;
  if (n == "heuristics") return sol_fake.heuristics;
  if (n == "lt_heuristic_compute") return sol_fake.lt_heuristic_compute;
  if (n == "CUDNN_FMA_MATH") return CUDNN_FMA_MATH;
  if (n == "CUDNN_TENSOR_OP_MATH") return CUDNN_TENSOR_OP_MATH;
  if (n == "CUDNN_DEFAULT_MATH") return CUDNN_DEFAULT_MATH;
  if (n == "CUBLAS_COMPUTE_32F") return CUBLAS_COMPUTE_32F;
  if (n == "CUBLAS_COMPUTE_32F_FAST_TF32") return CUBLAS_COMPUTE_32F_FAST_TF32;
  if (n == "CUBLAS_DEFAULT_MATH") return CUBLAS_DEFAULT_MATH;
  return -1;
}
