// The native kernels of PyTorch's VE device: strided N-d elementwise ops and reductions, run ON THE VE.
//
// Freestanding (no system header: LLVM's VE target ships no libc headers; the math is the compiler's __builtin_*,
// which become libm calls), built once per VE toolchain into SOL's cache (nc++ for a real VE, g++ for the emulated
// one) and loaded as one VEDA module; native_ops.cpp launches these two entry points with a descriptor as a VEDA
// stack argument. Every operand has its own dtype and strides, so broadcasting (stride 0), non-contiguous views,
// in-place ops (out aliases an input at the same offsets) and type promotion need no temporary copies.

#include "ve_kernels.h"

extern "C" int omp_get_num_threads(void);
extern "C" int omp_get_thread_num(void);
extern "C" int omp_get_max_threads(void);

namespace {

typedef sol_ve_i64 i64;
typedef __INT32_TYPE__ i32;
typedef __INT16_TYPE__ i16;
typedef __INT8_TYPE__ i8;
typedef __UINT8_TYPE__ u8;

// ---- math in the compute type (float stays float, like <cmath>'s overloads) -----------------------------------

inline float m_sqrt(float x) { return __builtin_sqrtf(x); }
inline double m_sqrt(double x) { return __builtin_sqrt(x); }
inline float m_exp(float x) { return __builtin_expf(x); }
inline double m_exp(double x) { return __builtin_exp(x); }
inline float m_log(float x) { return __builtin_logf(x); }
inline double m_log(double x) { return __builtin_log(x); }
inline float m_pow(float x, float y) { return __builtin_powf(x, y); }
inline double m_pow(double x, double y) { return __builtin_pow(x, y); }
inline float m_abs(float x) { return __builtin_fabsf(x); }
inline double m_abs(double x) { return __builtin_fabs(x); }
inline float m_trunc(float x) { return __builtin_truncf(x); }
inline double m_trunc(double x) { return __builtin_trunc(x); }
inline float m_floor(float x) { return __builtin_floorf(x); }
inline double m_floor(double x) { return __builtin_floor(x); }
inline float m_fmod(float x, float y) { return __builtin_fmodf(x, y); }
inline double m_fmod(double x, double y) { return __builtin_fmod(x, y); }
inline float m_copysign(float x, float y) { return __builtin_copysignf(x, y); }
inline double m_copysign(double x, double y) { return __builtin_copysign(x, y); }

template <class T> inline bool is_nan(T x) { return x != x; }
template <> inline bool is_nan<i64>(i64) { return false; }

// ---- per compute type: the integer versions of what floats do with the math above -----------------------------

template <class T> struct Arith {
    static T abs(T x) { return m_abs(x); }
    static T sqrt(T x) { return m_sqrt(x); }
    static T exp(T x) { return m_exp(x); }
    static T log(T x) { return m_log(x); }
    static T div(T a, T b) { return a / b; }
    static T div_trunc(T a, T b) { return m_trunc(a / b); }
    // PyTorch's div_floor_floating: floor of the exact quotient, not of the rounded one
    static T div_floor(T a, T b) {
        if (b == T(0)) return a / b;
        T mod = m_fmod(a, b);
        T div = (a - mod) / b;
        if (mod != T(0) && (b < T(0)) != (mod < T(0))) div -= T(1);
        T floor_div;
        if (div != T(0)) {
            floor_div = m_floor(div);
            if (div - floor_div > T(0.5)) floor_div += T(1);
        } else {
            floor_div = m_copysign(T(0), a / b);
        }
        return floor_div;
    }
    static T pow(T a, T b) { return m_pow(a, b); }
    static T ceil(T x) { return -m_floor(-x); }
    static T floor(T x) { return m_floor(x); }
    static T bit_not(T x) { return x; }
    static T bit_and(T a, T b) { return a; }
    static T bit_or(T a, T b) { return a; }
    static T bit_xor(T a, T b) { return a; }
};

template <> struct Arith<i64> {
    static i64 abs(i64 x) { return x < 0 ? -x : x; }
    static i64 sqrt(i64 x) { return i64(m_sqrt(double(x))); }  // the host never asks: sqrt of ints is float
    static i64 exp(i64 x) { return i64(m_exp(double(x))); }
    static i64 log(i64 x) { return i64(m_log(double(x))); }
    // integer division by zero raises on the CPU (ZeroDivisionError); a VE kernel must not trap, so it gives 0
    static i64 div(i64 a, i64 b) { return b == 0 ? 0 : a / b; }
    static i64 div_trunc(i64 a, i64 b) { return b == 0 ? 0 : a / b; }
    static i64 div_floor(i64 a, i64 b) {
        if (b == 0) return 0;
        i64 q = a / b;
        if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;
        return q;
    }
    // PyTorch's powi: negative exponents give 0 except for bases 1 and -1
    static i64 pow(i64 a, i64 b) {
        if (b < 0) {
            if (a == 1) return 1;
            if (a == -1) return (b & 1) ? -1 : 1;
            return 0;
        }
        i64 result = 1;
        while (b) {
            if (b & 1) result *= a;
            b >>= 1;
            a *= a;
        }
        return result;
    }
    static i64 ceil(i64 x) { return x; }
    static i64 floor(i64 x) { return x; }
    static i64 bit_not(i64 x) { return ~x; }
    static i64 bit_and(i64 a, i64 b) { return a & b; }
    static i64 bit_or(i64 a, i64 b) { return a | b; }
    static i64 bit_xor(i64 a, i64 b) { return a ^ b; }
};

// ---- loads and stores: any element type to and from the compute type ------------------------------------------

template <class T> inline T scalar_of(const sol_ve_operand& o);
template <> inline float scalar_of<float>(const sol_ve_operand& o) { return float(o.scalar_f); }
template <> inline double scalar_of<double>(const sol_ve_operand& o) { return o.scalar_f; }
template <> inline i64 scalar_of<i64>(const sol_ve_operand& o) { return o.scalar_i; }

template <class T> inline T load(const sol_ve_operand& o, i64 at) {
    const char* base = reinterpret_cast<const char*>(o.data);
    switch (o.dtype) {
        case SOL_VE_F32: return T(reinterpret_cast<const float*>(base)[at]);
        case SOL_VE_F64: return T(reinterpret_cast<const double*>(base)[at]);
        case SOL_VE_I64: return T(reinterpret_cast<const i64*>(base)[at]);
        case SOL_VE_I32: return T(reinterpret_cast<const i32*>(base)[at]);
        case SOL_VE_I16: return T(reinterpret_cast<const i16*>(base)[at]);
        case SOL_VE_I8: return T(reinterpret_cast<const i8*>(base)[at]);
        case SOL_VE_U8: return T(reinterpret_cast<const u8*>(base)[at]);
        default: return T(reinterpret_cast<const u8*>(base)[at] != 0);
    }
}

template <class T> inline void store(const sol_ve_operand& o, i64 at, T v) {
    char* base = reinterpret_cast<char*>(o.data);
    switch (o.dtype) {
        case SOL_VE_F32: reinterpret_cast<float*>(base)[at] = float(v); break;
        case SOL_VE_F64: reinterpret_cast<double*>(base)[at] = double(v); break;
        case SOL_VE_I64: reinterpret_cast<i64*>(base)[at] = i64(v); break;
        case SOL_VE_I32: reinterpret_cast<i32*>(base)[at] = i32(v); break;
        case SOL_VE_I16: reinterpret_cast<i16*>(base)[at] = i16(v); break;
        case SOL_VE_I8: reinterpret_cast<i8*>(base)[at] = i8(v); break;
        case SOL_VE_U8: reinterpret_cast<u8*>(base)[at] = u8(v); break;
        default: reinterpret_cast<u8*>(base)[at] = v != T(0) ? 1 : 0; break;
    }
}

// ---- the ops ------------------------------------------------------------------------------------------------------

template <class T> inline T maximum(T a, T b) {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return a > b ? a : b;
}

template <class T> inline T minimum(T a, T b) {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return a < b ? a : b;
}

// clamp propagates a NaN input or bound, like PyTorch
template <class T> inline T clamp_min(T x, T lo) {
    if (is_nan(x)) return x;
    if (is_nan(lo)) return lo;
    return x < lo ? lo : x;
}

template <class T> inline T clamp_max(T x, T hi) {
    if (is_nan(x)) return x;
    if (is_nan(hi)) return hi;
    return x > hi ? hi : x;
}

// PyTorch's lerp: exact at both ends (weight 0 gives start, weight 1 gives end)
template <class T> inline T lerp(T start, T end, T weight) {
    T diff = end - start;
    return m_abs(weight) < T(0.5) ? start + weight * diff : end - diff * (T(1) - weight);
}
template <> inline i64 lerp<i64>(i64 start, i64 end, i64 weight) { return start + weight * (end - start); }

template <class T> inline T apply(i64 op, T a, T b, T c, T alpha) {
    typedef Arith<T> A;
    switch (op) {
        case SOL_VE_COPY: return a;
        case SOL_VE_FILL: return alpha;
        case SOL_VE_NEG: return -a;
        case SOL_VE_ABS: return A::abs(a);
        case SOL_VE_SQRT: return A::sqrt(a);
        case SOL_VE_EXP: return A::exp(a);
        case SOL_VE_LOG: return A::log(a);
        case SOL_VE_RECIPROCAL: return A::div(T(1), a);
        case SOL_VE_LOGICAL_NOT: return T(a == T(0));
        case SOL_VE_BITWISE_NOT: return A::bit_not(a);
        case SOL_VE_ADD: return a + alpha * b;
        case SOL_VE_SUB: return a - alpha * b;
        case SOL_VE_MUL: return a * b;
        case SOL_VE_DIV: return A::div(a, b);
        case SOL_VE_DIV_TRUNC: return A::div_trunc(a, b);
        case SOL_VE_DIV_FLOOR: return A::div_floor(a, b);
        case SOL_VE_POW: return A::pow(a, b);
        case SOL_VE_POW_SCALAR: return A::pow(a, alpha);
        case SOL_VE_RPOW_SCALAR: return A::pow(alpha, a);
        case SOL_VE_EQ: return T(a == b);
        case SOL_VE_NE: return T(a != b);
        case SOL_VE_LT: return T(a < b);
        case SOL_VE_LE: return T(a <= b);
        case SOL_VE_GT: return T(a > b);
        case SOL_VE_GE: return T(a >= b);
        case SOL_VE_LOGICAL_AND: return T(a != T(0) && b != T(0));
        case SOL_VE_LOGICAL_OR: return T(a != T(0) || b != T(0));
        case SOL_VE_LOGICAL_XOR: return T((a != T(0)) != (b != T(0)));
        case SOL_VE_BITWISE_AND: return A::bit_and(a, b);
        case SOL_VE_BITWISE_OR: return A::bit_or(a, b);
        case SOL_VE_BITWISE_XOR: return A::bit_xor(a, b);
        case SOL_VE_MAXIMUM: return maximum(a, b);
        case SOL_VE_MINIMUM: return minimum(a, b);
        case SOL_VE_CLAMP: return clamp_max(clamp_min(a, b), c);
        case SOL_VE_CLAMP_MIN: return clamp_min(a, b);
        case SOL_VE_CLAMP_MAX: return clamp_max(a, b);
        case SOL_VE_WHERE: return a != T(0) ? b : c;
        case SOL_VE_LERP: return lerp(a, b, c);
        case SOL_VE_LERP_SCALAR: return lerp(a, b, alpha);
        case SOL_VE_ADDCMUL: return a + alpha * b * c;
        case SOL_VE_ADDCDIV: return a + alpha * b / c;
        case SOL_VE_CEIL: return A::ceil(a);
        case SOL_VE_FLOOR: return A::floor(a);
        case SOL_VE_MASKED_FILL: return a != T(0) ? alpha : b;
        default: return a;
    }
}

template <class T> inline T alpha_of(const sol_ve_elementwise& d);
template <> inline float alpha_of<float>(const sol_ve_elementwise& d) { return float(d.alpha_f); }
template <> inline double alpha_of<double>(const sol_ve_elementwise& d) { return d.alpha_f; }
template <> inline i64 alpha_of<i64>(const sol_ve_elementwise& d) { return d.alpha_i; }

// ---- the typed fast path: every tensor operand already in the compute type --------------------------------------

// The dtype whose elements are T itself (no conversion on load or store).
template <class T> struct Native;
template <> struct Native<float> { static constexpr i64 dtype = SOL_VE_F32; };
template <> struct Native<double> { static constexpr i64 dtype = SOL_VE_F64; };
template <> struct Native<i64> { static constexpr i64 dtype = SOL_VE_I64; };

// One row with the op fixed at compile time: no dtype or op switch inside the loop, which the VE compiler can then
// vectorise (scalars and missing inputs are stride-0 pointers; out may be an input at the same positions).
template <i64 OP, class T>
void typed_row(i64 n, T* o, i64 so, const T* a, i64 sa, const T* b, i64 sb, const T* c, i64 sc, T alpha) {
#pragma _NEC ivdep
    for (i64 i = 0; i < n; ++i) o[i * so] = apply<T>(OP, a[i * sa], b[i * sb], c[i * sc], alpha);
}

template <class T> using Row = void (*)(i64, T*, i64, const T*, i64, const T*, i64, const T*, i64, T);

template <class T> Row<T> typed_row_for(i64 op) {
    switch (op) {
#define SOL_VE_ROW(OP) \
    case OP: return &typed_row<OP, T>;
        SOL_VE_ROW(SOL_VE_COPY) SOL_VE_ROW(SOL_VE_FILL) SOL_VE_ROW(SOL_VE_NEG) SOL_VE_ROW(SOL_VE_ABS)
        SOL_VE_ROW(SOL_VE_SQRT) SOL_VE_ROW(SOL_VE_EXP) SOL_VE_ROW(SOL_VE_LOG) SOL_VE_ROW(SOL_VE_RECIPROCAL)
        SOL_VE_ROW(SOL_VE_LOGICAL_NOT) SOL_VE_ROW(SOL_VE_BITWISE_NOT) SOL_VE_ROW(SOL_VE_ADD) SOL_VE_ROW(SOL_VE_SUB)
        SOL_VE_ROW(SOL_VE_MUL) SOL_VE_ROW(SOL_VE_DIV) SOL_VE_ROW(SOL_VE_DIV_TRUNC) SOL_VE_ROW(SOL_VE_DIV_FLOOR)
        SOL_VE_ROW(SOL_VE_POW) SOL_VE_ROW(SOL_VE_POW_SCALAR) SOL_VE_ROW(SOL_VE_RPOW_SCALAR) SOL_VE_ROW(SOL_VE_EQ)
        SOL_VE_ROW(SOL_VE_NE) SOL_VE_ROW(SOL_VE_LT) SOL_VE_ROW(SOL_VE_LE) SOL_VE_ROW(SOL_VE_GT) SOL_VE_ROW(SOL_VE_GE)
        SOL_VE_ROW(SOL_VE_LOGICAL_AND) SOL_VE_ROW(SOL_VE_LOGICAL_OR) SOL_VE_ROW(SOL_VE_LOGICAL_XOR)
        SOL_VE_ROW(SOL_VE_BITWISE_AND) SOL_VE_ROW(SOL_VE_BITWISE_OR) SOL_VE_ROW(SOL_VE_BITWISE_XOR)
        SOL_VE_ROW(SOL_VE_MAXIMUM) SOL_VE_ROW(SOL_VE_MINIMUM) SOL_VE_ROW(SOL_VE_CLAMP) SOL_VE_ROW(SOL_VE_CLAMP_MIN)
        SOL_VE_ROW(SOL_VE_CLAMP_MAX) SOL_VE_ROW(SOL_VE_WHERE) SOL_VE_ROW(SOL_VE_LERP) SOL_VE_ROW(SOL_VE_LERP_SCALAR)
        SOL_VE_ROW(SOL_VE_ADDCMUL) SOL_VE_ROW(SOL_VE_ADDCDIV) SOL_VE_ROW(SOL_VE_CEIL) SOL_VE_ROW(SOL_VE_FLOOR)
        SOL_VE_ROW(SOL_VE_MASKED_FILL)
#undef SOL_VE_ROW
        default: return nullptr;
    }
}

// Whether every tensor operand (and the output) holds T itself.
template <class T> bool all_in_compute_type(const sol_ve_elementwise& d) {
    if (d.out.dtype != Native<T>::dtype) return false;
    for (i64 k = 0; k < d.ninputs; ++k)
        if (d.in[k].data && d.in[k].dtype != Native<T>::dtype) return false;
    return true;
}

// Linear positions [begin, end) of the iteration space: one row (dim 0) at a time, the offsets of the row's first
// element recomputed from its multi-index.
template <class T> void elementwise_range(const sol_ve_elementwise& d, i64 begin, i64 end) {
    const i64 ndim = d.ndim, n0 = ndim > 0 ? d.sizes[0] : 1;
    const T alpha = alpha_of<T>(d);
    const sol_ve_operand* in = d.in;
    // scalars: loaded once (their data pointer is 0)
    T scalar[3] = {T(0), T(0), T(0)};
    for (i64 k = 0; k < d.ninputs; ++k)
        if (in[k].data == 0) scalar[k] = scalar_of<T>(in[k]);
    const Row<T> row = all_in_compute_type<T>(d) ? typed_row_for<T>(d.op) : nullptr;
    i64 pos = begin;
    while (pos < end) {
        i64 rest = pos / n0, first = pos % n0;
        i64 at_out = first * (ndim > 0 ? d.out.strides[0] : 0), at_in[3] = {0, 0, 0};
        for (i64 k = 0; k < d.ninputs; ++k) at_in[k] = first * (ndim > 0 ? in[k].strides[0] : 0);
        for (i64 dim = 1; dim < ndim; ++dim) {
            i64 index = rest % d.sizes[dim];
            rest /= d.sizes[dim];
            at_out += index * d.out.strides[dim];
            for (i64 k = 0; k < d.ninputs; ++k) at_in[k] += index * in[k].strides[dim];
        }
        i64 count = n0 - first < end - pos ? n0 - first : end - pos;
        i64 so = ndim > 0 ? d.out.strides[0] : 0;
        i64 s0 = d.ninputs > 0 && ndim > 0 ? in[0].strides[0] : 0;
        i64 s1 = d.ninputs > 1 && ndim > 0 ? in[1].strides[0] : 0;
        i64 s2 = d.ninputs > 2 && ndim > 0 ? in[2].strides[0] : 0;
        if (row) {
            const T* p[3];
            i64 stride[3] = {s0, s1, s2};
            for (i64 k = 0; k < 3; ++k) {
                bool tensor = k < d.ninputs && in[k].data;
                p[k] = tensor ? reinterpret_cast<const T*>(in[k].data) + at_in[k] : &scalar[k];
                if (!tensor) stride[k] = 0;
            }
            row(count, reinterpret_cast<T*>(d.out.data) + at_out, so, p[0], stride[0], p[1], stride[1], p[2], stride[2],
                alpha);
            pos += count;
            continue;
        }
        for (i64 i = 0; i < count; ++i) {
            T a = d.ninputs > 0 ? (in[0].data ? load<T>(in[0], at_in[0] + i * s0) : scalar[0]) : T(0);
            T b = d.ninputs > 1 ? (in[1].data ? load<T>(in[1], at_in[1] + i * s1) : scalar[1]) : T(0);
            T c = d.ninputs > 2 ? (in[2].data ? load<T>(in[2], at_in[2] + i * s2) : scalar[2]) : T(0);
            store<T>(d.out, at_out + i * so, apply<T>(d.op, a, b, c, alpha));
        }
        pos += count;
    }
}

template <class T> void elementwise(const sol_ve_elementwise& d) {
    i64 numel = 1;
    for (i64 dim = 0; dim < d.ndim; ++dim) numel *= d.sizes[dim];
    if (numel == 0) return;
    if (numel < 4096) {  // not worth waking the other cores
        elementwise_range<T>(d, 0, numel);
        return;
    }
#pragma omp parallel
    {
        i64 threads = omp_get_num_threads(), me = omp_get_thread_num();
        i64 chunk = (numel + threads - 1) / threads;
        i64 begin = me * chunk, end = begin + chunk < numel ? begin + chunk : numel;
        if (begin < end) elementwise_range<T>(d, begin, end);
    }
}

// ---- reductions ---------------------------------------------------------------------------------------------------

i64 offset_of(i64 linear, i64 ndim, const i64* sizes, const i64* strides) {
    i64 at = 0;
    for (i64 dim = 0; dim < ndim; ++dim) {
        at += (linear % sizes[dim]) * strides[dim];
        linear /= sizes[dim];
    }
    return at;
}

// One result: the reduced dims of in from offset base, dim 0 of the reduced dims as the inner loop.
template <class A> void reduce_one(const sol_ve_reduction& d, i64 outer) {
    const i64 base = offset_of(outer, d.outer_ndim, d.outer_sizes, d.in.strides);
    i64 count = 1;
    for (i64 dim = 0; dim < d.inner_ndim; ++dim) count *= d.inner_sizes[dim];
    const i64 n0 = d.inner_ndim > 0 ? d.inner_sizes[0] : 1, s0 = d.inner_ndim > 0 ? d.inner_strides[0] : 0;
    A acc = A(0);
    i64 best = 0;
    bool have = false;
    for (i64 row = 0; row * n0 < count; ++row) {
        i64 at = base + (d.inner_ndim > 1 ? offset_of(row, d.inner_ndim - 1, d.inner_sizes + 1, d.inner_strides + 1) : 0);
        for (i64 i = 0; i < n0; ++i) {
            A v = load<A>(d.in, at + i * s0);
            i64 position = row * n0 + i;
            if (d.op == SOL_VE_SUM || d.op == SOL_VE_MEAN) {
                acc += v;
            } else if (!have) {
                acc = v, best = position, have = true;
            } else if (!is_nan(acc)) {  // the first NaN wins, as in PyTorch
                bool better = d.op == SOL_VE_MAX ? (v > acc || is_nan(v)) : (v < acc || is_nan(v));
                if (better) acc = v, best = position;
            }
        }
    }
    if (d.op == SOL_VE_MEAN) acc = acc / A(count);
    const i64 out_at = offset_of(outer, d.outer_ndim, d.outer_sizes, d.out.strides);
    store<A>(d.out, out_at, acc);
    if (d.index.data) {
        i64 index_at = offset_of(outer, d.outer_ndim, d.outer_sizes, d.index.strides);
        store<i64>(d.index, index_at, best);
    }
}

// A sum (or mean) of the whole tensor: rows split over the cores, partial sums added in thread order (the same
// result for the same thread count).
template <class A> void sum_all(const sol_ve_reduction& d) {
    constexpr int kMaxThreads = 256;
    i64 count = 1;
    for (i64 dim = 0; dim < d.inner_ndim; ++dim) count *= d.inner_sizes[dim];
    const i64 n0 = d.inner_ndim > 0 ? d.inner_sizes[0] : 1, s0 = d.inner_ndim > 0 ? d.inner_strides[0] : 0;
    const i64 rows = n0 > 0 ? count / n0 : 0;
    A partial[kMaxThreads];
    int used = 1;
    const int wanted = omp_get_max_threads() < kMaxThreads ? omp_get_max_threads() : kMaxThreads;
#pragma omp parallel num_threads(wanted)
    {
        const i64 threads = omp_get_num_threads(), me = omp_get_thread_num();
        const i64 chunk = (rows + threads - 1) / threads;
        const i64 begin = me * chunk, end = begin + chunk < rows ? begin + chunk : rows;
        A acc = A(0);
        for (i64 row = begin; row < end; ++row) {
            i64 at = d.inner_ndim > 1 ? offset_of(row, d.inner_ndim - 1, d.inner_sizes + 1, d.inner_strides + 1) : 0;
            for (i64 i = 0; i < n0; ++i) acc += load<A>(d.in, at + i * s0);
        }
        partial[me] = acc;
        if (me == 0) used = int(threads);
    }
    A total = A(0);
    for (int t = 0; t < used; ++t) total += partial[t];
    if (d.op == SOL_VE_MEAN) total = total / A(count);
    store<A>(d.out, 0, total);
}

template <class A> void reduction(const sol_ve_reduction& d) {
    i64 outer = 1;
    for (i64 dim = 0; dim < d.outer_ndim; ++dim) outer *= d.outer_sizes[dim];
    if (outer == 1) {
        i64 count = 1;
        for (i64 dim = 0; dim < d.inner_ndim; ++dim) count *= d.inner_sizes[dim];
        if ((d.op == SOL_VE_SUM || d.op == SOL_VE_MEAN) && count >= 65536) sum_all<A>(d);
        else reduce_one<A>(d, 0);
        return;
    }
#pragma omp parallel for
    for (i64 o = 0; o < outer; ++o) reduce_one<A>(d, o);
}

}  // namespace

extern "C" {

// The ABI version, checked by the host when the module loads.
sol_ve_u64 sol_ve_kernels_abi(void) { return SOL_VE_KERNELS_ABI; }

sol_ve_u64 sol_ve_elementwise_kernel(const struct sol_ve_elementwise* d) {
    if (d->op < 0 || d->op >= SOL_VE_OP_COUNT || d->ndim > SOL_VE_MAX_DIMS) return 1;
    switch (d->compute) {
        case SOL_VE_COMPUTE_F32: elementwise<float>(*d); break;
        case SOL_VE_COMPUTE_F64: elementwise<double>(*d); break;
        default: elementwise<i64>(*d); break;
    }
    return 0;
}

sol_ve_u64 sol_ve_reduction_kernel(const struct sol_ve_reduction* d) {
    if (d->op < 0 || d->op >= SOL_VE_REDUCE_OP_COUNT) return 1;
    if (d->compute == SOL_VE_COMPUTE_I64) reduction<i64>(*d);
    else reduction<double>(*d);
    return 0;
}

}  // extern "C"
