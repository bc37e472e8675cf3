/* The vednn API (NEC's sx-aurora-dev/vednn, src/vednn.h) as far as SOL's
 * emulated VE implements it: the same types, enums and signatures, so code
 * written for the real libvednn compiles unchanged against the emulated one.
 * No libc headers, like generated VE code. */
#ifndef __VEDNN__
#define __VEDNN__

#define VEDNN_EMULATED 1

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    VEDNN_SUCCESS = 0,
    VEDNN_ERROR_INVALID_PARAM = 1,
    VEDNN_ERROR_MEMORY_EXHAUST = 2,
} vednnError_t;

typedef enum {
    DTYPE_FLOAT,
} dataType_t;

typedef enum {
    VEDNN_ACTIVATION_RELU = 0,
} vednnActivationMode_t;

typedef enum {
    VEDNN_SOFTMAX_FAST = 0,
    VEDNN_SOFTMAX_ACCURATE,
    VEDNN_SOFTMAX_LOG
} vednnSoftmaxMode_t;

typedef enum {
    VEDNN_CONV_ALGORITHM_DIRECT,
} vednnConvolutionAlgorithm_t;

typedef struct {
    dataType_t dtype;
    int batch;
    int channel;
    int width;
    int height;
} vednnTensorParam_t;

typedef struct {
    dataType_t dtype;
    int channel;
} vednnBiasParam_t;

typedef enum {
    VEDNN_FILTER_LAYOUT_NCHW = 0, /* [outChannel][inChannel/group][height][width] */
    VEDNN_FILTER_LAYOUT_HWCN = 1  /* [height][width][inChannel][outChannel], group 1 only */
} filterLayout_t;

typedef struct {
    dataType_t dtype;
    filterLayout_t layout;
    int inChannel;  /* per group */
    int outChannel; /* per group */
    int width;
    int height;
} vednnFilterParam_t;

typedef struct {
    int group;
    int strideWidth;
    int strideHeight;
    int padWidth;
    int padHeight;
    int dilationWidth;
    int dilationHeight;
} vednnConvolutionParam_t;

typedef struct {
    int windowWidth;
    int windowHeight;
    int strideWidth;
    int strideHeight;
    int padWidth;
    int padHeight;
} vednnPoolingParam_t;

/* Tensors are NCHW float.  Linear: in [nBatch][inDim], weight [inDim][outDim], out [nBatch][outDim]. */

vednnError_t vednnConvolutionForward(
    const vednnTensorParam_t *pParamIn, const void *pDataIn,
    const vednnFilterParam_t *pParamKernel, const void *pDataKernel,
    const vednnTensorParam_t *pParamOut, void *pDataOut,
    const vednnConvolutionParam_t *pParamConv, vednnConvolutionAlgorithm_t algo);

vednnError_t vednnConvolutionForwardAddBias(
    const vednnTensorParam_t *pParamIn, const void *pDataIn,
    const vednnFilterParam_t *pParamKernel, const void *pDataKernel,
    const vednnBiasParam_t *pParamBias, const void *pDataBias,
    const vednnTensorParam_t *pParamOut, void *pDataOut,
    const vednnConvolutionParam_t *pParamConv, vednnConvolutionAlgorithm_t algo);

vednnError_t vednnConvolutionBackwardData(
    const vednnTensorParam_t *pParamGradOut, const void *pDataGradOut,
    const vednnFilterParam_t *pParamKernel, const void *pDataKernel,
    const vednnTensorParam_t *pParamGradIn, void *pDataGradIn,
    const vednnConvolutionParam_t *pParamConv, vednnConvolutionAlgorithm_t algo);

vednnError_t vednnConvolutionBackwardFilter(
    const vednnTensorParam_t *pParamIn, const void *pDataIn,
    const vednnTensorParam_t *pParamGradOut, const void *pDataGradOut,
    const vednnFilterParam_t *pParamGradKernel, void *pDataGradKernel,
    const vednnConvolutionParam_t *pParamConv, vednnConvolutionAlgorithm_t algo);

vednnError_t vednnLinearForward(
    const unsigned long inDim, const unsigned long outDim, const unsigned long nBatch,
    const void *pDataIn, const void *pDataWeight, void *pDataOut);

vednnError_t vednnLinearBackwardData(
    const unsigned long inDim, const unsigned long outDim, const unsigned long nBatch,
    const void *pDataGradOut, const void *pDataWeight, void *pDataGradIn);

vednnError_t vednnLinearBackwardWeight(
    const unsigned long inDim, const unsigned long outDim, const unsigned long nBatch,
    const void *pDataIn, const void *pDataGradOut, void *pDataGradWeight);

#ifdef __cplusplus
}
#endif
#endif
