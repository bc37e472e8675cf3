/* SOL's oneDNN glue: the small C API that generated model code calls.
 *
 * Generated code never includes dnnl.hpp (compiling it per model would cost
 * seconds); it fills plain descriptors and calls these functions, which are
 * compiled once per toolchain and linked into every model library.
 *
 * A handle owns the primitive descriptors of one library call (a Conv, a
 * transposed Conv or a MatMul with its fused post-ops). The descriptor is
 * produced by a callback for a given batch, so a model compiled with a
 * wildcard batch creates one primitive per batch it meets (cached), while
 * the packed weights keep the format chosen at creation.
 */
#ifndef SOL_DNNL_H
#define SOL_DNNL_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SOL_DNNL_MAX_DIMS 8
#define SOL_DNNL_MAX_POST 8

/* A dense tensor: logical dims, and the order of the dims in memory (outermost first); `type` is the element type
 * it lies in memory as (SOL_DNNL_F32, the default, or SOL_DNNL_BF16: a float32 activation SOL stores as bf16 between
 * bf16 calls; sol_dnnl_tensor_set leaves it as it is). */
typedef struct sol_dnnl_tensor {
  int32_t ndims;
  int32_t order[SOL_DNNL_MAX_DIMS];
  int64_t dims[SOL_DNNL_MAX_DIMS];
  int32_t type;
} sol_dnnl_tensor;

enum { SOL_DNNL_CONV = 0, SOL_DNNL_DECONV = 1, SOL_DNNL_MATMUL = 2, SOL_DNNL_INNER_PRODUCT = 3,
       SOL_DNNL_CONV_BWD_WEIGHTS = 4, SOL_DNNL_CONV_BWD_DATA = 5, SOL_DNNL_IP_BWD_WEIGHTS = 6,
       SOL_DNNL_IP_BWD_DATA = 7, SOL_DNNL_POOL = 8 };
/* POOL: a forward max or average pooling of src into dst over `kernel` (pool_alg: SOL_DNNL_POOL_*; stride, dilation,
 * pad_l, pad_r as for a convolution), no weights or bias; eltwise and binary post-ops as for the other ops;
 * sol_dnnl_execute(h, N, src, NULL, NULL, post, dst). */
enum { SOL_DNNL_POOL_MAX = 0, SOL_DNNL_POOL_AVG_INCLUDE_PAD = 1, SOL_DNNL_POOL_AVG_EXCLUDE_PAD = 2 };
/* Training ops (no post-ops), described in the forward convolution's (inner product's) terms:
 *   CONV_BWD_WEIGHTS, IP_BWD_WEIGHTS: src = the forward's input x, dst = its output gradient dy, weights = the
 *     weight gradient dw (written in the weights' dense order); sol_dnnl_execute(h, N, x, dy, NULL, NULL, dw)
 *   CONV_BWD_DATA, IP_BWD_DATA: src = the input gradient dx, dst = the output gradient dy, weights = the forward's
 *     weights (packed once per prepare when static); sol_dnnl_execute(h, N, dy, w, NULL, NULL, dx) */
enum { SOL_DNNL_ELTWISE = 0, SOL_DNNL_BINARY = 1 };
enum {
  SOL_DNNL_RELU = 0, SOL_DNNL_CLIP = 1, SOL_DNNL_ELU = 2, SOL_DNNL_GELU_ERF = 3, SOL_DNNL_GELU_TANH = 4,
  SOL_DNNL_LOGISTIC = 5, SOL_DNNL_TANH = 6, SOL_DNNL_SWISH = 7, SOL_DNNL_HARDSWISH = 8, SOL_DNNL_HARDSIGMOID = 9,
  SOL_DNNL_EXP = 10, SOL_DNNL_SQRT = 11, SOL_DNNL_ABS = 12, SOL_DNNL_LINEAR = 13
};
enum { SOL_DNNL_ADD = 0, SOL_DNNL_MUL = 1, SOL_DNNL_SUB = 2, SOL_DNNL_DIV = 3, SOL_DNNL_MAX = 4, SOL_DNNL_MIN = 5 };

/* One post-op: eltwise (alg, alpha, beta) or binary (alg with the tensor src1, broadcast to dst). */
typedef struct sol_dnnl_post {
  int32_t kind;
  int32_t alg;
  float alpha;
  float beta;
  sol_dnnl_tensor src1;
} sol_dnnl_post;

/* How a forward convolution runs: oneDNN's choice, or one of SOL's own kernels, which all need channels-last
 * src/dst, static weights, output channels a multiple of 8, no dilation and post-ops among relu/clip and binary
 * ops (otherwise, or on a CPU without AVX2/FMA, the call falls back to oneDNN):
 *   WINOGRAD, WINOGRAD_2X2: Winograd F(4x4, 3x3) or F(2x2, 3x3) (sol_winograd.h): 3x3 kernels, stride 1, no groups;
 *   GROUPED: the direct grouped/depthwise kernel (sol_grouped.h): groups of 8k output channels, or of 1 or 4
 *     output channels with as many input channels; with bf16-stored src and dst, the bf16 depthwise kernel
 *     (sol_depthwise.h: eltwise post-ops only, AVX-512BW and AVX512-BF16). */
enum { SOL_DNNL_DIRECT = 0, SOL_DNNL_WINOGRAD = 1, SOL_DNNL_WINOGRAD_2X2 = 2, SOL_DNNL_GROUPED = 3 };
/* A Winograd algorithm may be ORed with how its work is split between the threads (sol_winograd.h): without
 * either flag the kernel picks by the size of the transformed weights. */
enum { SOL_DNNL_WINOGRAD_BLOCKS = 0x100, SOL_DNNL_WINOGRAD_PHASES = 0x200, SOL_DNNL_SCHEDULE_MASK = 0xF00 };
/* How an INNER_PRODUCT runs: oneDNN's inner product (DIRECT), or LINEAR_1X1: the same rows as a 1x1 convolution
 * over an M x 1 channels-last image, whose brgconv_1x1 kernels run 1.3-1.45x faster than the inner product's at
 * ViT's 197 rows (the glue rewrites the descriptor; operands keep their memory layout), or LINEAR_BLAS: MKL's
 * packed GEMM (sol_blas.h) followed by one oneDNN binary primitive in place for the bias and the post-ops (fp32,
 * plain 2-d operands, static weights; otherwise, or in a library built without MKL, the inner product), or
 * LINEAR_MATMUL: oneDNN's matmul of the [M, C] rows by the weights read as [C, K] (packed in its own format), whose
 * brgemm blocking differs from the inner product's (the glue rewrites the descriptor; post-ops as they are). */
enum { SOL_DNNL_LINEAR_1X1 = 4, SOL_DNNL_LINEAR_BLAS = 5, SOL_DNNL_LINEAR_MATMUL = 6 };

typedef struct sol_dnnl_desc {
  int32_t op;              /* SOL_DNNL_CONV / DECONV / MATMUL / INNER_PRODUCT / POOL (and the training ops) */
  int32_t algorithm;       /* SOL_DNNL_DIRECT, or one of SOL's kernels (forward convolutions) / LINEAR_1X1 */
  int32_t static_weights;  /* 1: weights are parameters, packed once by sol_dnnl_pack */
  int32_t has_bias;
  int32_t npost;
  sol_dnnl_tensor src, weights, bias, dst;  /* weights in oneDNN's logical order ([G,] O, I, k...) */
  int64_t stride[3], dilation[3], pad_l[3], pad_r[3];  /* dilation as oneDNN counts it (0: dense) */
  sol_dnnl_post post[SOL_DNNL_MAX_POST];
  /* 1: the input is multiplied by a factor per input channel before the convolution (squeeze-excitation's gate):
   * post_src[number of binary post-ops] points at those C floats, which each call folds into a copy of the packed
   * weights (conv(x * s, w) = conv(x, w * s)), so the scaled input is never written. Forward convolutions with
   * static weights, no groups, batch 1, run by oneDNN; in bf16 the fp32 weights are scaled and packed as bf16 per
   * call. */
  int32_t src_scale;
  /* The operand type of a forward call (sol.precision): SOL_DNNL_F32, or SOL_DNNL_BF16: src and weights in bf16
   * (an fp32-stored src converted per call, a bf16-stored one read as it is; static weights packed as bf16 once per
   * prepare), fp32 accumulation, bias and post-ops, dst written in its stored type. Training calls and SOL's own
   * kernels ignore it (fp32; they take no bf16-stored tensors). A call oneDNN has no bf16 kernel for computes in
   * fp32, converting bf16-stored src and dst around the call. */
  int32_t precision;
  int32_t pool_alg;   /* POOL: SOL_DNNL_POOL_MAX / _AVG_INCLUDE_PAD / _AVG_EXCLUDE_PAD */
  int64_t kernel[3];  /* POOL: the window's size per spatial dim */
} sol_dnnl_desc;
enum { SOL_DNNL_F32 = 0, SOL_DNNL_BF16 = 1 };

typedef void (*sol_dnnl_fill)(int64_t batch, sol_dnnl_desc* desc);

static inline void sol_dnnl_tensor_set(sol_dnnl_tensor* t, int32_t ndims, const int64_t* dims, const int32_t* order) {
  t->ndims = ndims;
  for (int32_t i = 0; i < ndims; ++i) {
    t->dims[i] = dims[i];
    t->order[i] = order[i];
  }
}

/* NULL when oneDNN rejects the descriptor (the reason is in sol_dnnl_last_error()). */
void* sol_dnnl_create(sol_dnnl_fill fill, int64_t batch);
const char* sol_dnnl_last_error(void);
/* bytes of the packed weights (0 without static weights) */
int64_t sol_dnnl_packed_bytes(void* handle);
/* reorders the framework's weights into the packed format; 0 on success */
int sol_dnnl_pack(void* handle, const void* weights, void* packed);
/* one call; weights: the packed weights (static) or the runtime operand; post_src: src1 of each binary post-op,
 * then the input-channel factors of a call with src_scale */
int sol_dnnl_execute(void* handle, int64_t batch, const void* src, const void* weights, const void* bias,
                     const void* const* post_src, void* dst);
/* the implementation oneDNN picked for the creation batch, e.g. "brgconv:avx2" ("winograd_4x4_3x3:sol:avx2" or
 * "winograd_2x2_3x3:sol:avx2" for SOL's own) */
const char* sol_dnnl_impl(void* handle);

/* Autotuning (called at compile time through ctypes): seconds[i] is the time of one channels-last 2-D
 * convolution (bias, no post-ops) with algorithms[i] over `runs` calls on arbitrary data (the median; against
 * SOL_DNNL_DIRECT, when timed, the median per-round ratio to it times its median), or a negative value when that
 * algorithm cannot run it. Each call starts with its input in the cache and everything else evicted, as in a
 * model. The algorithms are timed in interleaved rounds, so that a burst of load on a shared machine hits them
 * all alike. shape: N, H, W, C, K, groups, kernel h, w, stride h, w, padding top, left,
 * bottom, right. precision: SOL_DNNL_F32, or SOL_DNNL_BF16 (bf16 operands, src and dst stored as bf16, as between
 * the calls of a bf16 model). */
enum { SOL_DNNL_SHAPE_DIMS = 14 };
void sol_dnnl_time_conv(const int32_t* algorithms, int32_t count, const int64_t* shape, int32_t precision,
                        int32_t runs, double* seconds);
/* The same for an inner product of `rows` x `in` by `out` x `in` weights (bias, no post-ops), algorithms DIRECT,
 * LINEAR_1X1 or LINEAR_BLAS, computing in `precision` (SOL_DNNL_F32, or SOL_DNNL_BF16: bf16 operands with src and dst
 * stored as bf16, as between the calls of a bf16 model; MKL's fp32 GEMM is no candidate then). */
void sol_dnnl_time_linear(const int32_t* algorithms, int32_t count, int64_t rows, int64_t in, int64_t out,
                          int32_t precision, int32_t runs, double* seconds);

#ifdef __cplusplus
}
#endif
#endif
