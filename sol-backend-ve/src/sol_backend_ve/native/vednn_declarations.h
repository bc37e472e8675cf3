// vednn (sx-aurora-dev/vednn, src/vednn.h): the types and functions SOL calls, declared here (no header).
typedef enum { VEDNN_SUCCESS = 0, VEDNN_ERROR_INVALID_PARAM = 1, VEDNN_ERROR_MEMORY_EXHAUST = 2 } vednnError_t;
typedef enum { DTYPE_FLOAT } dataType_t;
typedef enum { VEDNN_CONV_ALGORITHM_DIRECT } vednnConvolutionAlgorithm_t;
typedef enum { VEDNN_FILTER_LAYOUT_NCHW = 0, VEDNN_FILTER_LAYOUT_HWCN = 1 } filterLayout_t;
typedef struct { dataType_t dtype; int batch; int channel; int width; int height; } vednnTensorParam_t;
typedef struct { dataType_t dtype; int channel; } vednnBiasParam_t;
typedef struct { dataType_t dtype; filterLayout_t layout; int inChannel; int outChannel; int width; int height; }
    vednnFilterParam_t;
typedef struct { int group; int strideWidth; int strideHeight; int padWidth; int padHeight; int dilationWidth;
                 int dilationHeight; } vednnConvolutionParam_t;
extern "C" {
vednnError_t vednnConvolutionForward(const vednnTensorParam_t*, const void*, const vednnFilterParam_t*, const void*,
                                     const vednnTensorParam_t*, void*, const vednnConvolutionParam_t*,
                                     vednnConvolutionAlgorithm_t);
vednnError_t vednnConvolutionForwardAddBias(const vednnTensorParam_t*, const void*, const vednnFilterParam_t*,
                                            const void*, const vednnBiasParam_t*, const void*,
                                            const vednnTensorParam_t*, void*, const vednnConvolutionParam_t*,
                                            vednnConvolutionAlgorithm_t);
vednnError_t vednnConvolutionBackwardData(const vednnTensorParam_t*, const void*, const vednnFilterParam_t*,
                                          const void*, const vednnTensorParam_t*, void*,
                                          const vednnConvolutionParam_t*, vednnConvolutionAlgorithm_t);
vednnError_t vednnConvolutionBackwardFilter(const vednnTensorParam_t*, const void*, const vednnTensorParam_t*,
                                            const void*, const vednnFilterParam_t*, void*,
                                            const vednnConvolutionParam_t*, vednnConvolutionAlgorithm_t);
vednnError_t vednnLinearForward(const unsigned long inDim, const unsigned long outDim, const unsigned long nBatch,
                                const void* pDataIn, const void* pDataWeight, void* pDataOut);
vednnError_t vednnLinearBackwardWeight(const unsigned long inDim, const unsigned long outDim,
                                       const unsigned long nBatch, const void* pDataIn, const void* pDataGradOut,
                                       void* pDataGradWeight);
}
static inline vednnTensorParam_t sol_vednn_tensor(int64_t n, int64_t c, int64_t h, int64_t w) {
  vednnTensorParam_t t; t.dtype = DTYPE_FLOAT; t.batch = (int)n; t.channel = (int)c; t.width = (int)w;
  t.height = (int)h; return t;
}
// a filter of ``groups`` groups: ``out``/``in`` are the channels per group; PyTorch's [O][I/g][kh][kw] is NCHW
static inline vednnFilterParam_t sol_vednn_filter(int64_t out, int64_t in, int64_t kh, int64_t kw) {
  vednnFilterParam_t f; f.dtype = DTYPE_FLOAT; f.layout = VEDNN_FILTER_LAYOUT_NCHW; f.inChannel = (int)in;
  f.outChannel = (int)out; f.width = (int)kw; f.height = (int)kh; return f;
}
// stride, symmetric padding and dilation (1: none) per (height, width)
static inline vednnConvolutionParam_t sol_vednn_conv(int64_t groups, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                                                     int64_t dh, int64_t dw) {
  vednnConvolutionParam_t c; c.group = (int)groups; c.strideWidth = (int)sw; c.strideHeight = (int)sh;
  c.padWidth = (int)pw; c.padHeight = (int)ph; c.dilationWidth = (int)dw; c.dilationHeight = (int)dh; return c;
}
