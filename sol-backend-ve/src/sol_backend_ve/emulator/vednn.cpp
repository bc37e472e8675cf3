// The emulated VE's libvednn: plain loops with vednn's semantics (checked
// against numpy in tests/test_emulator.py).  Correct and readable, not fast:
// the emulator exists to test SOL's VE code paths on machines without a VE.
#include "vednn.h"

#include <cstring>

namespace {

// One convolution's geometry, with the checks vednn makes.
struct Conv {
    long n, g, ic, icg, ih, iw, oc, ocg, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
    bool hwcn;

    bool init(const vednnTensorParam_t* in, const vednnFilterParam_t* f, const vednnTensorParam_t* out,
              const vednnConvolutionParam_t* c) {
        if (!in || !f || !out || !c || in->dtype != DTYPE_FLOAT || f->dtype != DTYPE_FLOAT || out->dtype != DTYPE_FLOAT)
            return false;
        n = in->batch; ic = in->channel; ih = in->height; iw = in->width;
        oc = out->channel; oh = out->height; ow = out->width;
        kh = f->height; kw = f->width;
        g = c->group > 0 ? c->group : 1;
        sh = c->strideHeight; sw = c->strideWidth; ph = c->padHeight; pw = c->padWidth;
        dh = c->dilationHeight > 0 ? c->dilationHeight : 1;
        dw = c->dilationWidth > 0 ? c->dilationWidth : 1;
        hwcn = f->layout == VEDNN_FILTER_LAYOUT_HWCN;
        if (out->batch != n || ic % g || oc % g || sh <= 0 || sw <= 0 || (hwcn && g != 1)) return false;
        icg = ic / g; ocg = oc / g;
        return f->inChannel == icg && f->outChannel == ocg;
    }
    // Filter element for output channel o (of all), input channel i (within its group).
    long w(long o, long i, long y, long x) const {
        return hwcn ? ((y * kw + x) * icg + i) * oc + o : ((o * icg + i) * kh + y) * kw + x;
    }
    long at_in(long b, long c, long y, long x) const { return ((b * ic + c) * ih + y) * iw + x; }
    long at_out(long b, long c, long y, long x) const { return ((b * oc + c) * oh + y) * ow + x; }
    // The input row/column a kernel tap reads for an output row/column; -1 when it falls in the padding.
    long iy(long y, long ky) const { long v = y * sh - ph + ky * dh; return v >= 0 && v < ih ? v : -1; }
    long ix(long x, long kx) const { long v = x * sw - pw + kx * dw; return v >= 0 && v < iw ? v : -1; }
};

// The output columns [x0, x1) whose input column x * sw + off (off = kx * dw - pw) lies in the image: the
// inner loops run over them without a bounds check per element (so g++ vectorises them).
void columns(const Conv& c, long off, long* x0, long* x1) {
    *x0 = off >= 0 ? 0 : (-off + c.sw - 1) / c.sw;
    long last = c.iw - 1 - off;
    *x1 = last < 0 ? 0 : last / c.sw + 1;
    if (*x1 > c.ow) *x1 = c.ow;
    if (*x0 > *x1) *x0 = *x1;
}

// Each output plane accumulates its taps in vednn's order (bias, then input channel, kernel row, kernel column).
vednnError_t forward(const Conv& c, const float* in, const float* w, const float* bias, float* out) {
#pragma omp parallel for collapse(2)
    for (long b = 0; b < c.n; ++b)
        for (long o = 0; o < c.oc; ++o) {
            long grp = o / c.ocg;
            float* plane = out + c.at_out(b, o, 0, 0);
            const float init = bias ? bias[o] : 0.0f;
            for (long p = 0; p < c.oh * c.ow; ++p) plane[p] = init;
            for (long i = 0; i < c.icg; ++i) {
                const float* image = in + c.at_in(b, grp * c.icg + i, 0, 0);
                for (long ky = 0; ky < c.kh; ++ky)
                    for (long kx = 0; kx < c.kw; ++kx) {
                        const float wv = w[c.w(o, i, ky, kx)];
                        const long off = kx * c.dw - c.pw;
                        long x0, x1;
                        columns(c, off, &x0, &x1);
                        for (long y = 0; y < c.oh; ++y) {
                            long yy = c.iy(y, ky);
                            if (yy < 0) continue;
                            const float* row = image + yy * c.iw + off;
                            float* dst = plane + y * c.ow;
                            for (long x = x0; x < x1; ++x) dst[x] += wv * row[x * c.sw];
                        }
                    }
            }
        }
    return VEDNN_SUCCESS;
}

}  // namespace

extern "C" {

vednnError_t vednnConvolutionForward(const vednnTensorParam_t* pIn, const void* in, const vednnFilterParam_t* pK,
                                     const void* k, const vednnTensorParam_t* pOut, void* out,
                                     const vednnConvolutionParam_t* pConv, vednnConvolutionAlgorithm_t) {
    Conv c;
    if (!c.init(pIn, pK, pOut, pConv)) return VEDNN_ERROR_INVALID_PARAM;
    return forward(c, (const float*)in, (const float*)k, nullptr, (float*)out);
}

vednnError_t vednnConvolutionForwardAddBias(const vednnTensorParam_t* pIn, const void* in, const vednnFilterParam_t* pK,
                                            const void* k, const vednnBiasParam_t* pBias, const void* bias,
                                            const vednnTensorParam_t* pOut, void* out,
                                            const vednnConvolutionParam_t* pConv, vednnConvolutionAlgorithm_t) {
    Conv c;
    if (!c.init(pIn, pK, pOut, pConv) || !pBias || pBias->dtype != DTYPE_FLOAT || pBias->channel != c.oc)
        return VEDNN_ERROR_INVALID_PARAM;
    return forward(c, (const float*)in, (const float*)k, (const float*)bias, (float*)out);
}

// Gradient of the input: every output gradient scatters back through the taps
// that produced it.  One thread per image keeps the scatter race-free.
vednnError_t vednnConvolutionBackwardData(const vednnTensorParam_t* pGradOut, const void* gradOut,
                                          const vednnFilterParam_t* pK, const void* k,
                                          const vednnTensorParam_t* pGradIn, void* gradIn,
                                          const vednnConvolutionParam_t* pConv, vednnConvolutionAlgorithm_t) {
    Conv c;
    if (!c.init(pGradIn, pK, pGradOut, pConv)) return VEDNN_ERROR_INVALID_PARAM;
    const float* go = (const float*)gradOut;
    const float* w = (const float*)k;
    float* gi = (float*)gradIn;
    memset(gi, 0, sizeof(float) * size_t(c.n * c.ic * c.ih * c.iw));
#pragma omp parallel for
    for (long b = 0; b < c.n; ++b)
        for (long o = 0; o < c.oc; ++o) {
            long grp = o / c.ocg;
            const float* plane = go + c.at_out(b, o, 0, 0);
            for (long i = 0; i < c.icg; ++i) {
                float* image = gi + c.at_in(b, grp * c.icg + i, 0, 0);
                for (long ky = 0; ky < c.kh; ++ky)
                    for (long kx = 0; kx < c.kw; ++kx) {
                        const float wv = w[c.w(o, i, ky, kx)];
                        const long off = kx * c.dw - c.pw;
                        long x0, x1;
                        columns(c, off, &x0, &x1);
                        for (long y = 0; y < c.oh; ++y) {
                            long yy = c.iy(y, ky);
                            if (yy < 0) continue;
                            float* row = image + yy * c.iw + off;
                            const float* src = plane + y * c.ow;
                            for (long x = x0; x < x1; ++x) row[x * c.sw] += src[x] * wv;
                        }
                    }
            }
        }
    return VEDNN_SUCCESS;
}

vednnError_t vednnConvolutionBackwardFilter(const vednnTensorParam_t* pIn, const void* in,
                                            const vednnTensorParam_t* pGradOut, const void* gradOut,
                                            const vednnFilterParam_t* pGradK, void* gradK,
                                            const vednnConvolutionParam_t* pConv, vednnConvolutionAlgorithm_t) {
    Conv c;
    if (!c.init(pIn, pGradK, pGradOut, pConv)) return VEDNN_ERROR_INVALID_PARAM;
    const float* x_ = (const float*)in;
    const float* go = (const float*)gradOut;
    float* gw = (float*)gradK;
#pragma omp parallel for collapse(2)
    for (long o = 0; o < c.oc; ++o)
        for (long i = 0; i < c.icg; ++i) {
            long grp = o / c.ocg;
            for (long ky = 0; ky < c.kh; ++ky)
                for (long kx = 0; kx < c.kw; ++kx) {
                    const long off = kx * c.dw - c.pw;
                    long x0, x1;
                    columns(c, off, &x0, &x1);
                    float sum = 0.0f;
                    for (long b = 0; b < c.n; ++b) {
                        const float* image = x_ + c.at_in(b, grp * c.icg + i, 0, 0);
                        const float* plane = go + c.at_out(b, o, 0, 0);
                        for (long y = 0; y < c.oh; ++y) {
                            long yy = c.iy(y, ky);
                            if (yy < 0) continue;
                            const float* row = image + yy * c.iw + off;
                            const float* src = plane + y * c.ow;
                            for (long x = x0; x < x1; ++x) sum += row[x * c.sw] * src[x];
                        }
                    }
                    gw[c.w(o, i, ky, kx)] = sum;
                }
        }
    return VEDNN_SUCCESS;
}

vednnError_t vednnLinearForward(const unsigned long inDim, const unsigned long outDim, const unsigned long nBatch,
                                const void* pIn, const void* pWeight, void* pOut) {
    const float* in = (const float*)pIn;
    const float* w = (const float*)pWeight;
    float* out = (float*)pOut;
#pragma omp parallel for
    for (unsigned long b = 0; b < nBatch; ++b)
        for (unsigned long o = 0; o < outDim; ++o) {
            float sum = 0.0f;
            for (unsigned long i = 0; i < inDim; ++i) sum += in[b * inDim + i] * w[i * outDim + o];
            out[b * outDim + o] = sum;
        }
    return VEDNN_SUCCESS;
}

vednnError_t vednnLinearBackwardData(const unsigned long inDim, const unsigned long outDim, const unsigned long nBatch,
                                     const void* pGradOut, const void* pWeight, void* pGradIn) {
    const float* go = (const float*)pGradOut;
    const float* w = (const float*)pWeight;
    float* gi = (float*)pGradIn;
#pragma omp parallel for
    for (unsigned long b = 0; b < nBatch; ++b)
        for (unsigned long i = 0; i < inDim; ++i) {
            float sum = 0.0f;
            for (unsigned long o = 0; o < outDim; ++o) sum += go[b * outDim + o] * w[i * outDim + o];
            gi[b * inDim + i] = sum;
        }
    return VEDNN_SUCCESS;
}

vednnError_t vednnLinearBackwardWeight(const unsigned long inDim, const unsigned long outDim, const unsigned long nBatch,
                                       const void* pIn, const void* pGradOut, void* pGradWeight) {
    const float* in = (const float*)pIn;
    const float* go = (const float*)pGradOut;
    float* gw = (float*)pGradWeight;
#pragma omp parallel for
    for (unsigned long i = 0; i < inDim; ++i)
        for (unsigned long o = 0; o < outDim; ++o) {
            float sum = 0.0f;
            for (unsigned long b = 0; b < nBatch; ++b) sum += in[b * inDim + i] * go[b * outDim + o];
            gw[i * outDim + o] = sum;
        }
    return VEDNN_SUCCESS;
}

}  // extern "C"
