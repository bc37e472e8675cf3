// What the host (the PyTorch extension, native_ops.cpp) and the VE kernel library (ve_kernels.cpp) agree on: the
// launch descriptors of the native VE ops, passed by value as one VEDA stack argument.
//
// No system header: the VE side is freestanding (LLVM's VE target has no libc headers), and only 64-bit fields, so
// the layout is the same on x86 and on the VE. Bump SOL_VE_KERNELS_ABI when a field or an enum value changes.
#pragma once

#define SOL_VE_KERNELS_ABI 2
#define SOL_VE_MAX_DIMS 16

typedef __INT64_TYPE__ sol_ve_i64;
typedef __UINT64_TYPE__ sol_ve_u64;

// Element types of VE tensors the kernels read and write (others take the CPU fallback).
enum sol_ve_dtype {
    SOL_VE_F32 = 0,
    SOL_VE_F64 = 1,
    SOL_VE_I64 = 2,
    SOL_VE_I32 = 3,
    SOL_VE_I16 = 4,
    SOL_VE_I8 = 5,
    SOL_VE_U8 = 6,
    SOL_VE_BOOL = 7,
};

// The type an elementwise op computes in (PyTorch's common dtype: float stays float, integers and bool use int64).
enum sol_ve_compute { SOL_VE_COMPUTE_F32 = 0, SOL_VE_COMPUTE_F64 = 1, SOL_VE_COMPUTE_I64 = 2 };

// Elementwise ops: out = f(in0, in1, in2; alpha, beta).
enum sol_ve_op {
    SOL_VE_COPY = 0,      // in0 (casts between dtypes)
    SOL_VE_FILL,          // alpha
    SOL_VE_NEG,
    SOL_VE_ABS,
    SOL_VE_SQRT,
    SOL_VE_EXP,
    SOL_VE_LOG,
    SOL_VE_RECIPROCAL,
    SOL_VE_LOGICAL_NOT,
    SOL_VE_BITWISE_NOT,   // integers only (bool uses LOGICAL_NOT)
    SOL_VE_ADD,           // in0 + alpha * in1
    SOL_VE_SUB,           // in0 - alpha * in1
    SOL_VE_MUL,
    SOL_VE_DIV,           // floating point only
    SOL_VE_DIV_TRUNC,
    SOL_VE_DIV_FLOOR,
    SOL_VE_POW,           // in0 ** in1
    SOL_VE_POW_SCALAR,    // in0 ** alpha
    SOL_VE_RPOW_SCALAR,   // alpha ** in0
    SOL_VE_EQ,
    SOL_VE_NE,
    SOL_VE_LT,
    SOL_VE_LE,
    SOL_VE_GT,
    SOL_VE_GE,
    SOL_VE_LOGICAL_AND,
    SOL_VE_LOGICAL_OR,
    SOL_VE_LOGICAL_XOR,
    SOL_VE_BITWISE_AND,
    SOL_VE_BITWISE_OR,
    SOL_VE_BITWISE_XOR,
    SOL_VE_MAXIMUM,       // NaN wins, as in PyTorch
    SOL_VE_MINIMUM,
    SOL_VE_CLAMP,         // clamp(in0, min=in1, max=in2)
    SOL_VE_CLAMP_MIN,     // clamp(in0, min=in1)
    SOL_VE_CLAMP_MAX,     // clamp(in0, max=in1)
    SOL_VE_WHERE,         // in0 ? in1 : in2
    SOL_VE_LERP,          // in0 + in2 * (in1 - in0), PyTorch's two-sided formula
    SOL_VE_LERP_SCALAR,   // in0 + alpha * (in1 - in0)
    SOL_VE_ADDCMUL,       // in0 + alpha * in1 * in2
    SOL_VE_ADDCDIV,       // in0 + alpha * in1 / in2
    SOL_VE_CEIL,
    SOL_VE_FLOOR,
    SOL_VE_MASKED_FILL,   // in0 ? alpha : in1
    SOL_VE_OP_COUNT
};

// Reductions over the inner dims of in, one result per outer index.
enum sol_ve_reduce_op { SOL_VE_SUM = 0, SOL_VE_MEAN, SOL_VE_MIN, SOL_VE_MAX, SOL_VE_REDUCE_OP_COUNT };

// One tensor argument: data == 0 means a scalar (a CPU scalar tensor or a Python number) held in scalar_*.
struct sol_ve_operand {
    sol_ve_u64 data;                       // raw VE address of element 0 (vedaMemPtr), storage offset included
    sol_ve_i64 dtype;                      // sol_ve_dtype
    double scalar_f;                       // the scalar, already rounded to the compute type
    sol_ve_i64 scalar_i;
    sol_ve_i64 strides[SOL_VE_MAX_DIMS];   // in elements
};

struct sol_ve_elementwise {
    sol_ve_i64 op;                         // sol_ve_op
    sol_ve_i64 compute;                    // sol_ve_compute
    sol_ve_i64 ndim;                       // dims of the iteration space (dim 0 varies fastest)
    sol_ve_i64 ninputs;
    double alpha_f, beta_f;                // scalar parameters in the float compute types
    sol_ve_i64 alpha_i, beta_i;            // ... and in the integer one
    sol_ve_i64 sizes[SOL_VE_MAX_DIMS];
    struct sol_ve_operand out;
    struct sol_ve_operand in[3];
};

struct sol_ve_reduction {
    sol_ve_i64 op;                         // sol_ve_reduce_op
    sol_ve_i64 compute;                    // SOL_VE_COMPUTE_F64 (floats accumulate in double) or SOL_VE_COMPUTE_I64
    sol_ve_i64 outer_ndim, inner_ndim;     // kept dims (one result each) and reduced dims (dim 0 fastest in each)
    sol_ve_i64 outer_sizes[SOL_VE_MAX_DIMS];
    sol_ve_i64 inner_sizes[SOL_VE_MAX_DIMS];
    sol_ve_i64 inner_strides[SOL_VE_MAX_DIMS];  // of in, over the reduced dims
    struct sol_ve_operand in;              // strides: over the outer dims
    struct sol_ve_operand out;             // strides: over the outer dims
    struct sol_ve_operand index;           // int64 position of the min/max in the reduced dims (data 0: not wanted)
};
