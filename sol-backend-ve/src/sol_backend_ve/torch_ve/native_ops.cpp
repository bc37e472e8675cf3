// Native ops of PyTorch's VE device: ATen's TensorIterator does broadcasting, type promotion, output resizing and
// overlap checks on the host; the kernels of ve_kernels.cpp then run on the VE with each operand's own dtype and
// strides. Registered for the VE key are the out= forms: PyTorch routes the functional and in-place forms of
// these structured ops through them (functional: a fresh VE output; in place: out is self).
//
// An op whose tensors have a dtype the kernels do not know (half, complex, ...) runs through the CPU fallback, with
// its warning, like an op without a kernel.

#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>
// the ops whose CPU fallback is called by name (ATEN_OP): their headers only, not all of ATen/Operators.h
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/bitwise_and_ops.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/bitwise_or_ops.h>
#include <ATen/ops/bitwise_xor_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/ceil_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/clamp_max_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/floor_ops.h>
#include <ATen/ops/floor_divide_ops.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/logical_and_ops.h>
#include <ATen/ops/logical_not_ops.h>
#include <ATen/ops/logical_or_ops.h>
#include <ATen/ops/logical_xor_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/where_ops.h>

#include <optional>
#include <vector>

#ifndef ATEN_OP2  // ATen/Operators.h defines them (with every op's header)
#define ATEN_OP(op_name) at::_ops::op_name
#define ATEN_OP2(op_name, overload) at::_ops::op_name##_##overload
#endif

#include "sol_torch_ve.h"

namespace sol_ve {

bool native_dtype(at::ScalarType type) {
    switch (type) {
        case at::kFloat:
        case at::kDouble:
        case at::kLong:
        case at::kInt:
        case at::kShort:
        case at::kChar:
        case at::kByte:
        case at::kBool:
            return true;
        default:
            return false;
    }
}

namespace {

constexpr c10::DeviceType kVE = c10::DeviceType::VE;

int64_t dtype_code(at::ScalarType type) {
    switch (type) {
        case at::kFloat: return SOL_VE_F32;
        case at::kDouble: return SOL_VE_F64;
        case at::kLong: return SOL_VE_I64;
        case at::kInt: return SOL_VE_I32;
        case at::kShort: return SOL_VE_I16;
        case at::kChar: return SOL_VE_I8;
        case at::kByte: return SOL_VE_U8;
        default: return SOL_VE_BOOL;
    }
}

// The type a result of dtype ``type`` is computed in: float stays float, double double, integers and bool int64.
int64_t compute_code(at::ScalarType type) {
    if (type == at::kFloat) return SOL_VE_COMPUTE_F32;
    if (at::isFloatingType(type)) return SOL_VE_COMPUTE_F64;
    return SOL_VE_COMPUTE_I64;
}

// Whether every defined tensor has a dtype the kernels know (CPU scalars included: their value is read here).
bool all_native(std::initializer_list<const at::Tensor*> tensors) {
    for (const at::Tensor* t : tensors)
        if (t->defined() && !native_dtype(t->scalar_type())) return false;
    return true;
}

void set_scalar(sol_ve_operand& o, const at::Scalar& value, int64_t compute) {
    o.data = 0;
    o.dtype = SOL_VE_F64;
    // rounded to the compute type first, as the CPU kernels do when they cast a scalar to the common dtype
    o.scalar_f = compute == SOL_VE_COMPUTE_F32 ? double(value.to<float>()) : value.to<double>();
    o.scalar_i = value.isFloatingPoint() ? int64_t(value.to<double>()) : value.to<int64_t>();
}

struct Params {
    at::Scalar alpha = 0;
    std::vector<at::Scalar> extra_scalars;  // inputs after the iterator's own: scalars (clamp bounds)
};

// Fill the descriptor from a built iterator and queue the kernel on the iterator's VE.
void run(at::TensorIteratorBase& iter, int64_t op, int64_t compute, const Params& params = {}) {
    if (iter.numel() == 0) return;
    TORCH_CHECK(iter.ndim() <= SOL_VE_MAX_DIMS, "VE kernels take at most ", SOL_VE_MAX_DIMS, " dims after "
                "coalescing, got ", iter.ndim(), ": make the tensors contiguous or move them to the CPU");
    TORCH_CHECK(iter.noutputs() == 1, "VE elementwise kernels write one output");
    int ninputs = iter.ninputs() + int(params.extra_scalars.size());
    TORCH_CHECK(ninputs <= 3, "VE elementwise kernels take at most 3 inputs");
    sol_ve_elementwise d{};
    d.op = op;
    d.compute = compute;
    d.ndim = iter.ndim();
    d.ninputs = ninputs;
    d.alpha_f = compute == SOL_VE_COMPUTE_F32 ? double(params.alpha.to<float>()) : params.alpha.to<double>();
    d.alpha_i = params.alpha.isFloatingPoint() ? int64_t(params.alpha.to<double>()) : params.alpha.to<int64_t>();
    for (int64_t dim = 0; dim < iter.ndim(); ++dim) d.sizes[dim] = iter.shape()[dim];
    int device = -1;
    auto operand = [&](int arg, sol_ve_operand& o) {
        if (iter.is_cpu_scalar(arg)) {  // a Python number or CPU scalar tensor: its value travels in the descriptor
            if (at::isFloatingType(iter.dtype(arg))) set_scalar(o, iter.scalar_value<double>(arg), compute);
            else set_scalar(o, iter.scalar_value<int64_t>(arg), compute);
            return;
        }
        TORCH_CHECK(iter.device(arg).type() == kVE, "expected a VE tensor as operand ", arg, ", got ",
                    iter.device(arg));
        if (device < 0) device = iter.device(arg).index();
        o.data = reinterpret_cast<uint64_t>(iter.data_ptr(arg));
        o.dtype = dtype_code(iter.dtype(arg));
        int64_t size = iter.element_size(arg);
        auto strides = iter.strides(arg);
        for (int64_t dim = 0; dim < iter.ndim(); ++dim) o.strides[dim] = strides[dim] / size;
    };
    operand(0, d.out);
    for (int k = 0; k < iter.ninputs(); ++k) operand(1 + k, d.in[k]);
    for (size_t k = 0; k < params.extra_scalars.size(); ++k)
        set_scalar(d.in[iter.ninputs() + k], params.extra_scalars[k], compute);
    launch(device, KernelKind::elementwise, &d, sizeof d);
}

at::TensorIteratorConfig base_config(const at::Tensor& out) {
    at::TensorIteratorConfig config;
    config.set_check_mem_overlap(true).allow_cpu_scalars(true).check_all_same_dtype(false).add_output(out);
    return config;
}

// out = op(inputs...) computed in the type of out (ops whose result dtype PyTorch already chose: clamp, pow, where)
void run_in_out_type(const at::Tensor& out, std::initializer_list<const at::Tensor*> inputs, int64_t op,
                     const Params& params = {}, std::optional<at::ScalarType> compute_as = std::nullopt) {
    auto config = base_config(out);
    for (const at::Tensor* t : inputs) config.add_const_input(*t);
    auto iter = config.build();
    run(iter, op, compute_code(compute_as.value_or(iter.dtype(0))), params);
}

int64_t ve_index(std::initializer_list<const at::Tensor*> tensors) {
    for (const at::Tensor* t : tensors)
        if (t->defined() && t->device().type() == kVE) return t->device().index();
    return 0;
}

#define VE_FALLBACK(OP, ...) at::native::call_fallback_fn<&cpu_fallback, OP>::call(__VA_ARGS__)

void check_integral_alpha(const at::Tensor& out, const at::Scalar& alpha, const char* op) {
    TORCH_CHECK(!(at::isIntegralType(out.scalar_type(), true) && alpha.isFloatingPoint()), op,
                ": for integral input tensors, argument alpha must not be a floating point number.");
}

// ---- binary arithmetic --------------------------------------------------------------------------------------------

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha, at::Tensor& out) {
    if (!all_native({&self, &other, &out})) return VE_FALLBACK(ATEN_OP2(add, out), self, other, alpha, out);
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, other);
    check_integral_alpha(out, alpha, "add");
    run(iter, SOL_VE_ADD, compute_code(iter.common_dtype()), {alpha});
    return out;
}

at::Tensor& sub_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha, at::Tensor& out) {
    if (!all_native({&self, &other, &out})) return VE_FALLBACK(ATEN_OP2(sub, out), self, other, alpha, out);
    TORCH_CHECK(self.scalar_type() != at::kBool || other.scalar_type() != at::kBool,
                "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` "
                "operator instead.");
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, other);
    check_integral_alpha(out, alpha, "sub");
    run(iter, SOL_VE_SUB, compute_code(iter.common_dtype()), {alpha});
    return out;
}

at::Tensor& mul_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (!all_native({&self, &other, &out})) return VE_FALLBACK(ATEN_OP2(mul, out), self, other, out);
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, other);
    run(iter, SOL_VE_MUL, compute_code(iter.common_dtype()));
    return out;
}

at::Tensor& div_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (!all_native({&self, &other, &out})) return VE_FALLBACK(ATEN_OP2(div, out), self, other, out);
    auto iter = at::TensorIterator::binary_float_op(out, self, other);
    run(iter, SOL_VE_DIV, compute_code(iter.common_dtype()));
    return out;
}

at::Tensor& div_mode_out(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode,
                         at::Tensor& out) {
    if (!mode.has_value()) return div_out(self, other, out);
    if (!all_native({&self, &other, &out}))
        return VE_FALLBACK(ATEN_OP2(div, out_mode), self, other, mode, out);
    TORCH_CHECK(*mode == "trunc" || *mode == "floor", "div expected rounding_mode to be one of None, 'trunc', or "
                "'floor' but found '", *mode, "'");
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, other);
    run(iter, *mode == "trunc" ? SOL_VE_DIV_TRUNC : SOL_VE_DIV_FLOOR, compute_code(iter.common_dtype()));
    return out;
}

at::Tensor& ve_floor_divide_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (!all_native({&self, &other, &out})) return VE_FALLBACK(ATEN_OP2(floor_divide, out), self, other, out);
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, other);
    run(iter, SOL_VE_DIV_FLOOR, compute_code(iter.common_dtype()));
    return out;
}

// floor_divide is not a structured op: its functional and in-place forms reach the VE key themselves
at::Tensor ve_floor_divide(const at::Tensor& self, const at::Tensor& other) {
    if (!all_native({&self, &other})) return VE_FALLBACK(ATEN_OP(floor_divide), self, other);
    at::Tensor out;
    auto iter = at::TensorIterator::binary_op(out, self, other);
    run(iter, SOL_VE_DIV_FLOOR, compute_code(iter.common_dtype()));
    return iter.output();
}

at::Tensor& ve_floor_divide_(at::Tensor& self, const at::Tensor& other) {
    return ve_floor_divide_out(self, other, self);
}

at::Tensor& maximum_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (!all_native({&self, &other, &out})) return VE_FALLBACK(ATEN_OP2(maximum, out), self, other, out);
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, other);
    run(iter, SOL_VE_MAXIMUM, compute_code(iter.common_dtype()));
    return out;
}

at::Tensor& minimum_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (!all_native({&self, &other, &out})) return VE_FALLBACK(ATEN_OP2(minimum, out), self, other, out);
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, other);
    run(iter, SOL_VE_MINIMUM, compute_code(iter.common_dtype()));
    return out;
}

// ---- comparisons and logical ops: bool (or out's) results, computed in the inputs' common dtype ------------------

at::Tensor& compare(const at::Tensor& self, const at::Tensor& other, at::Tensor& out, int64_t op) {
    auto iter = at::TensorIterator::comparison_op(out, self, other);
    run(iter, op, compute_code(iter.common_dtype()));
    return out;
}

#define VE_COMPARISON(NAME, OP)                                                                                  \
    at::Tensor& NAME##_tensor_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {            \
        if (!all_native({&self, &other, &out}))                                                                  \
            return VE_FALLBACK(ATEN_OP2(NAME, Tensor_out), self, other, out);                                     \
        return compare(self, other, out, OP);                                                                    \
    }                                                                                                            \
    at::Tensor& NAME##_scalar_out(const at::Tensor& self, const at::Scalar& other, at::Tensor& out) {            \
        if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(NAME, Scalar_out), self, other, out);        \
        return compare(self, at::native::wrapped_scalar_tensor(other), out, OP);                                 \
    }

VE_COMPARISON(eq, SOL_VE_EQ)
VE_COMPARISON(ne, SOL_VE_NE)
VE_COMPARISON(lt, SOL_VE_LT)
VE_COMPARISON(le, SOL_VE_LE)
VE_COMPARISON(gt, SOL_VE_GT)
VE_COMPARISON(ge, SOL_VE_GE)

#define VE_LOGICAL(NAME, OP)                                                                                     \
    at::Tensor& NAME##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {                   \
        if (!all_native({&self, &other, &out})) return VE_FALLBACK(ATEN_OP2(NAME, out), self, other, out);       \
        return compare(self, other, out, OP);                                                                    \
    }

VE_LOGICAL(logical_and, SOL_VE_LOGICAL_AND)
VE_LOGICAL(logical_or, SOL_VE_LOGICAL_OR)
VE_LOGICAL(logical_xor, SOL_VE_LOGICAL_XOR)

at::Tensor& logical_not_out(const at::Tensor& self, at::Tensor& out) {
    if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(logical_not, out), self, out);
    auto config = base_config(out);
    config.add_const_input(self);
    auto iter = config.build();
    run(iter, SOL_VE_LOGICAL_NOT, compute_code(self.scalar_type()));
    return out;
}

// bitwise ops: integers and bool only (float inputs take the fallback, where PyTorch raises its own error)
#define VE_BITWISE(NAME, OP)                                                                                     \
    at::Tensor& NAME##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {                   \
        if (!all_native({&self, &other, &out}) || at::isFloatingType(self.scalar_type()) ||                     \
            at::isFloatingType(other.scalar_type()))                                                             \
            return VE_FALLBACK(ATEN_OP2(NAME, Tensor_out), self, other, out);                                     \
        auto iter = at::TensorIterator::borrowing_binary_op(out, self, other);                                   \
        run(iter, OP, SOL_VE_COMPUTE_I64);                                                                       \
        return out;                                                                                              \
    }

VE_BITWISE(bitwise_and, SOL_VE_BITWISE_AND)
VE_BITWISE(bitwise_or, SOL_VE_BITWISE_OR)
VE_BITWISE(bitwise_xor, SOL_VE_BITWISE_XOR)

at::Tensor& bitwise_not_out(const at::Tensor& self, at::Tensor& out) {
    if (!all_native({&self, &out}) || at::isFloatingType(self.scalar_type()))
        return VE_FALLBACK(ATEN_OP2(bitwise_not, out), self, out);
    auto iter = at::TensorIterator::unary_op(out, self);
    run(iter, self.scalar_type() == at::kBool ? SOL_VE_LOGICAL_NOT : SOL_VE_BITWISE_NOT, SOL_VE_COMPUTE_I64);
    return out;
}

// ---- unary math ---------------------------------------------------------------------------------------------------

#define VE_UNARY(NAME, OP)                                                                                       \
    at::Tensor& NAME##_out(const at::Tensor& self, at::Tensor& out) {                                            \
        if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(NAME, out), self, out);                      \
        auto iter = at::TensorIterator::unary_op(out, self);                                                     \
        run(iter, OP, compute_code(iter.common_dtype()));                                                        \
        return out;                                                                                              \
    }

// float results for integer inputs (sqrt(int) is float)
#define VE_UNARY_FLOAT(NAME, OP)                                                                                 \
    at::Tensor& NAME##_out(const at::Tensor& self, at::Tensor& out) {                                            \
        if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(NAME, out), self, out);                      \
        auto iter = at::TensorIterator::unary_float_op(out, self);                                               \
        run(iter, OP, compute_code(iter.common_dtype()));                                                        \
        return out;                                                                                              \
    }

VE_UNARY(neg, SOL_VE_NEG)
VE_UNARY(abs, SOL_VE_ABS)
VE_UNARY(ceil, SOL_VE_CEIL)
VE_UNARY(floor, SOL_VE_FLOOR)
VE_UNARY_FLOAT(sqrt, SOL_VE_SQRT)
VE_UNARY_FLOAT(exp, SOL_VE_EXP)
VE_UNARY_FLOAT(log, SOL_VE_LOG)
VE_UNARY_FLOAT(reciprocal, SOL_VE_RECIPROCAL)

// ---- clamp --------------------------------------------------------------------------------------------------------

at::Tensor& clamp_out(const at::Tensor& self, const std::optional<at::Scalar>& min,
                      const std::optional<at::Scalar>& max, at::Tensor& out) {
    if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(clamp, out), self, min, max, out);
    TORCH_CHECK(min.has_value() || max.has_value(), "torch.clamp: At least one of 'min' or 'max' must not be None");
    at::native::resize_output(out, self.sizes());
    if (min && max) run_in_out_type(out, {&self}, SOL_VE_CLAMP, {0, {*min, *max}});
    else if (min) run_in_out_type(out, {&self}, SOL_VE_CLAMP_MIN, {0, {*min}});
    else run_in_out_type(out, {&self}, SOL_VE_CLAMP_MAX, {0, {*max}});
    return out;
}

at::Tensor& clamp_tensor_out(const at::Tensor& self, const std::optional<at::Tensor>& min,
                             const std::optional<at::Tensor>& max, at::Tensor& out) {
    const at::Tensor none;
    const at::Tensor& lo = min.has_value() ? *min : none;
    const at::Tensor& hi = max.has_value() ? *max : none;
    if (!all_native({&self, &lo, &hi, &out})) return VE_FALLBACK(ATEN_OP2(clamp, Tensor_out), self, min, max, out);
    TORCH_CHECK(lo.defined() || hi.defined(), "torch.clamp: At least one of 'min' or 'max' must not be None");
    if (lo.defined() && hi.defined()) {
        auto iter = at::TensorIteratorConfig().set_check_mem_overlap(true).allow_cpu_scalars(true)
                        .promote_inputs_to_common_dtype(true).cast_common_dtype_to_outputs(true)
                        .enforce_safe_casting_to_output(true).add_output(out).add_const_input(self)
                        .add_const_input(lo).add_const_input(hi).build();
        run(iter, SOL_VE_CLAMP, compute_code(iter.common_dtype()));
    } else {
        auto iter = at::TensorIterator::borrowing_binary_op(out, self, lo.defined() ? lo : hi);
        run(iter, lo.defined() ? SOL_VE_CLAMP_MIN : SOL_VE_CLAMP_MAX, compute_code(iter.common_dtype()));
    }
    return out;
}

at::Tensor& clamp_min_out(const at::Tensor& self, const at::Scalar& min, at::Tensor& out) {
    if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(clamp_min, out), self, min, out);
    at::native::resize_output(out, self.sizes());
    run_in_out_type(out, {&self}, SOL_VE_CLAMP_MIN, {0, {min}});
    return out;
}

at::Tensor& clamp_max_out(const at::Tensor& self, const at::Scalar& max, at::Tensor& out) {
    if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(clamp_max, out), self, max, out);
    at::native::resize_output(out, self.sizes());
    run_in_out_type(out, {&self}, SOL_VE_CLAMP_MAX, {0, {max}});
    return out;
}

at::Tensor& clamp_min_tensor_out(const at::Tensor& self, const at::Tensor& min, at::Tensor& out) {
    if (!all_native({&self, &min, &out})) return VE_FALLBACK(ATEN_OP2(clamp_min, Tensor_out), self, min, out);
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, min);
    run(iter, SOL_VE_CLAMP_MIN, compute_code(iter.common_dtype()));
    return out;
}

at::Tensor& clamp_max_tensor_out(const at::Tensor& self, const at::Tensor& max, at::Tensor& out) {
    if (!all_native({&self, &max, &out})) return VE_FALLBACK(ATEN_OP2(clamp_max, Tensor_out), self, max, out);
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, max);
    run(iter, SOL_VE_CLAMP_MAX, compute_code(iter.common_dtype()));
    return out;
}

// ---- pow ----------------------------------------------------------------------------------------------------------

at::Tensor& pow_tensor_scalar_out(const at::Tensor& self, const at::Scalar& exponent, at::Tensor& out) {
    if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(pow, Tensor_Scalar_out), self, exponent, out);
    TORCH_CHECK(!(at::isIntegralType(self.scalar_type(), true) && exponent.isIntegral(true) &&
                  exponent.toLong() < 0),
                "Integers to negative integer powers are not allowed.");
    at::native::resize_output(out, self.sizes());
    run_in_out_type(out, {&self}, SOL_VE_POW_SCALAR, {exponent});
    return out;
}

at::Tensor& pow_tensor_tensor_out(const at::Tensor& self, const at::Tensor& exponent, at::Tensor& out) {
    if (!all_native({&self, &exponent, &out}))
        return VE_FALLBACK(ATEN_OP2(pow, Tensor_Tensor_out), self, exponent, out);
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, exponent);
    run(iter, SOL_VE_POW, compute_code(iter.common_dtype()));
    return out;
}

at::Tensor& pow_scalar_out(const at::Scalar& self, const at::Tensor& exponent, at::Tensor& out) {
    if (!all_native({&exponent, &out})) return VE_FALLBACK(ATEN_OP2(pow, Scalar_out), self, exponent, out);
    at::native::resize_output(out, exponent.sizes());
    run_in_out_type(out, {&exponent}, SOL_VE_RPOW_SCALAR, {self});
    return out;
}

// ---- where, lerp, addcmul, addcdiv ----------------------------------------------------------------------------

at::Tensor& where_out(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (!all_native({&condition, &self, &other, &out}))
        return VE_FALLBACK(ATEN_OP2(where, self_out), condition, self, other, out);
    TORCH_CHECK(condition.scalar_type() == at::kBool || condition.scalar_type() == at::kByte,
                "where expected condition to be a boolean tensor, but got a tensor with dtype ",
                condition.scalar_type());
    at::ScalarType result = at::result_type(self, other);
    auto iter = base_config(out).add_const_input(condition).add_const_input(self).add_const_input(other).build();
    run(iter, SOL_VE_WHERE, compute_code(result));
    return out;
}

at::Tensor where_self(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
    if (!all_native({&condition, &self, &other}))
        return VE_FALLBACK(ATEN_OP2(where, self), condition, self, other);
    auto shape = at::infer_size_dimvector(condition.sizes(), at::infer_size_dimvector(self.sizes(), other.sizes()));
    at::Tensor out = at::empty(shape, self.options().dtype(at::result_type(self, other))
                                          .device(c10::Device(kVE, ve_index({&condition, &self, &other}))));
    return where_out(condition, self, other, out);
}

at::Tensor& masked_fill_scalar(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
    if (!all_native({&self, &mask})) return VE_FALLBACK(ATEN_OP2(masked_fill_, Scalar), self, mask, value);
    TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
                mask.scalar_type());
    auto iter = at::TensorIteratorConfig().set_check_mem_overlap(false).check_all_same_dtype(false)
                    .resize_outputs(false).add_output(self).add_const_input(mask).add_const_input(self).build();
    run(iter, SOL_VE_MASKED_FILL, compute_code(self.scalar_type()), {value});
    return self;
}

at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
    TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
                value.dim(), " dimension(s).");
    return masked_fill_scalar(self, mask, value.item());
}

at::Tensor& lerp_scalar_out(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight,
                            at::Tensor& out) {
    if (!all_native({&self, &end, &out})) return VE_FALLBACK(ATEN_OP2(lerp, Scalar_out), self, end, weight, out);
    TORCH_CHECK(self.scalar_type() == end.scalar_type(), "expected dtype ", self.scalar_type(),
                " for `end` but got dtype ", end.scalar_type());
    auto iter = at::TensorIterator::borrowing_binary_op(out, self, end);
    run(iter, SOL_VE_LERP_SCALAR, compute_code(iter.common_dtype()), {weight});
    return out;
}

at::Tensor& lerp_tensor_out(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight,
                            at::Tensor& out) {
    if (!all_native({&self, &end, &weight, &out}))
        return VE_FALLBACK(ATEN_OP2(lerp, Tensor_out), self, end, weight, out);
    TORCH_CHECK(self.scalar_type() == end.scalar_type() && self.scalar_type() == weight.scalar_type(),
                "expected dtype ", self.scalar_type(), " for `end` and `weight`, but got ", end.scalar_type(),
                " and ", weight.scalar_type());
    auto iter = base_config(out).add_const_input(self).add_const_input(end).add_const_input(weight).build();
    run(iter, SOL_VE_LERP, compute_code(self.scalar_type()));
    return out;
}

at::Tensor& pointwise_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                          const at::Scalar& value, at::Tensor& out, int64_t op) {
    auto iter = at::TensorIteratorConfig().set_check_mem_overlap(true).allow_cpu_scalars(true)
                    .promote_inputs_to_common_dtype(true).cast_common_dtype_to_outputs(true)
                    .enforce_safe_casting_to_output(true).add_output(out).add_const_input(self)
                    .add_const_input(t1).add_const_input(t2).build();
    run(iter, op, compute_code(iter.common_dtype()), {value});
    return out;
}

at::Tensor& addcmul_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const at::Scalar& value,
                        at::Tensor& out) {
    if (!all_native({&self, &t1, &t2, &out})) return VE_FALLBACK(ATEN_OP2(addcmul, out), self, t1, t2, value, out);
    return pointwise_out(self, t1, t2, value, out, SOL_VE_ADDCMUL);
}

at::Tensor& addcdiv_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const at::Scalar& value,
                        at::Tensor& out) {
    if (!all_native({&self, &t1, &t2, &out})) return VE_FALLBACK(ATEN_OP2(addcdiv, out), self, t1, t2, value, out);
    TORCH_CHECK(!(at::isIntegralType(t1.scalar_type(), true) && at::isIntegralType(t2.scalar_type(), true)),
                "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform "
                "a true division of tensor1 and tensor2. Use torch.addcdiv(input, tensor1, tensor2.float()) instead.");
    return pointwise_out(self, t1, t2, value, out, SOL_VE_ADDCDIV);
}

// ---- reductions ---------------------------------------------------------------------------------------------------

// Reduce ``self`` over ``dims`` (all when empty) into ``out`` (and the positions into ``index`` for one dim).
void reduce(const at::Tensor& self, std::vector<int64_t> dims, bool keepdim, at::Tensor& out, at::Tensor* index,
            int64_t op, const char* name) {
    const int64_t ndim = self.dim();
    std::vector<bool> reduced(size_t(std::max<int64_t>(ndim, 1)), false);
    if (dims.empty()) std::fill(reduced.begin(), reduced.end(), true);
    for (int64_t& d : dims) {
        d = at::maybe_wrap_dim(d, ndim);
        TORCH_CHECK(!reduced[size_t(d)] || dims.size() == 0, name, ": dim ", d, " appears multiple times in the list "
                    "of dims");
        reduced[size_t(d)] = true;
    }
    std::vector<int64_t> shape;
    for (int64_t d = 0; d < ndim; ++d) {
        if (!reduced[size_t(d)]) shape.push_back(self.size(d));
        else if (keepdim) shape.push_back(1);
        if (reduced[size_t(d)] && (op == SOL_VE_MIN || op == SOL_VE_MAX))
            TORCH_CHECK(self.size(d) > 0, name, "(): Expected reduction dim ", d, " to have non-zero size.");
    }
    if (op == SOL_VE_MIN || op == SOL_VE_MAX)
        TORCH_CHECK(self.numel() > 0 || ndim > 0, name, "(): Expected reduction dim to be specified for "
                    "input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
    at::native::resize_output(out, shape);
    if (index) at::native::resize_output(*index, shape);
    if (out.numel() == 0) return;
    TORCH_CHECK(ndim <= SOL_VE_MAX_DIMS, name, " on the VE takes at most ", SOL_VE_MAX_DIMS, " dims");
    sol_ve_reduction d{};
    d.op = op;
    d.compute = at::isFloatingType(self.scalar_type()) || at::isFloatingType(out.scalar_type())
                    ? SOL_VE_COMPUTE_F64 : SOL_VE_COMPUTE_I64;
    d.in.data = reinterpret_cast<uint64_t>(self.data_ptr());
    d.in.dtype = dtype_code(self.scalar_type());
    d.out.data = reinterpret_cast<uint64_t>(out.data_ptr());
    d.out.dtype = dtype_code(out.scalar_type());
    if (index) {
        d.index.data = reinterpret_cast<uint64_t>(index->data_ptr());
        d.index.dtype = SOL_VE_I64;
    }
    // dims from the last (fastest) to the first; out's (and index's) strides follow its kept dims
    int64_t out_dim = int64_t(shape.size()) - 1;
    for (int64_t dim = ndim - 1; dim >= 0; --dim) {
        bool r = reduced[size_t(dim)];
        int64_t out_stride = 0, index_stride = 0;
        if (!r || keepdim) {
            out_stride = out.stride(out_dim);
            index_stride = index ? index->stride(out_dim) : 0;
            --out_dim;
        }
        if (r) {
            d.inner_sizes[d.inner_ndim] = self.size(dim);
            d.inner_strides[d.inner_ndim] = self.stride(dim);
            ++d.inner_ndim;
        } else {
            d.outer_sizes[d.outer_ndim] = self.size(dim);
            d.in.strides[d.outer_ndim] = self.stride(dim);
            d.out.strides[d.outer_ndim] = out_stride;
            d.index.strides[d.outer_ndim] = index_stride;
            ++d.outer_ndim;
        }
    }
    launch(int(self.device().index()), KernelKind::reduction, &d, sizeof d);
}

std::vector<int64_t> dim_list(at::OptionalIntArrayRef dim) {
    return dim.has_value() ? dim->vec() : std::vector<int64_t>{};
}

at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
    if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(sum, IntList_out), self, dim, keepdim, dtype, out);
    reduce(self, dim_list(dim), keepdim, out, nullptr, SOL_VE_SUM, "sum");
    return out;
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
    if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(mean, out), self, dim, keepdim, dtype, out);
    TORCH_CHECK(at::isFloatingType(out.scalar_type()), "mean(): could not infer output dtype. Input dtype must be "
                "either a floating point or complex dtype. Got: ", self.scalar_type());
    reduce(self, dim_list(dim), keepdim, out, nullptr, SOL_VE_MEAN, "mean");
    return out;
}

at::Tensor full_min_max(const at::Tensor& self, int64_t op, const char* name) {
    at::Tensor out = at::empty({}, self.options());
    reduce(self, {}, false, out, nullptr, op, name);
    return out;
}

at::Tensor min_all(const at::Tensor& self) {
    if (!all_native({&self})) return VE_FALLBACK(ATEN_OP(min), self);
    TORCH_CHECK(self.numel() > 0, "min(): Expected reduction dim to be specified for input.numel() == 0. Specify "
                "the reduction dim with the 'dim' argument.");
    return full_min_max(self, SOL_VE_MIN, "min");
}

at::Tensor max_all(const at::Tensor& self) {
    if (!all_native({&self})) return VE_FALLBACK(ATEN_OP(max), self);
    TORCH_CHECK(self.numel() > 0, "max(): Expected reduction dim to be specified for input.numel() == 0. Specify "
                "the reduction dim with the 'dim' argument.");
    return full_min_max(self, SOL_VE_MAX, "max");
}

std::tuple<at::Tensor&, at::Tensor&> max_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& max,
                                                 at::Tensor& indices) {
    if (!all_native({&self, &max})) return VE_FALLBACK(ATEN_OP2(max, dim_max), self, dim, keepdim, max, indices);
    reduce(self, {dim}, keepdim, max, &indices, SOL_VE_MAX, "max");
    return {max, indices};
}

std::tuple<at::Tensor&, at::Tensor&> min_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& min,
                                                 at::Tensor& indices) {
    if (!all_native({&self, &min})) return VE_FALLBACK(ATEN_OP2(min, dim_min), self, dim, keepdim, min, indices);
    reduce(self, {dim}, keepdim, min, &indices, SOL_VE_MIN, "min");
    return {min, indices};
}

at::Tensor& amax_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
    if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(amax, out), self, dim, keepdim, out);
    reduce(self, dim.vec(), keepdim, out, nullptr, SOL_VE_MAX, "amax");
    return out;
}

at::Tensor& amin_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
    if (!all_native({&self, &out})) return VE_FALLBACK(ATEN_OP2(amin, out), self, dim, keepdim, out);
    reduce(self, dim.vec(), keepdim, out, nullptr, SOL_VE_MIN, "amin");
    return out;
}

// ---- cat ----------------------------------------------------------------------------------------------------------

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
    auto list = tensors.materialize();
    bool native = native_dtype(out.scalar_type());
    for (const at::Tensor& t : list) native = native && native_dtype(t.scalar_type());
    if (!native) return VE_FALLBACK(ATEN_OP2(cat, out), tensors, dim, out);
    // 1-d empty tensors are skipped, as PyTorch's cat does (a legacy rule)
    std::vector<at::Tensor> parts;
    for (const at::Tensor& t : list)
        if (!(t.dim() == 1 && t.numel() == 0)) parts.push_back(t);
    TORCH_CHECK(!list.empty(), "torch.cat(): expected a non-empty list of Tensors");
    if (parts.empty()) {
        at::native::resize_output(out, {0});
        return out;
    }
    const at::Tensor& first = parts[0];
    TORCH_CHECK(first.dim() > 0, "zero-dimensional tensor (at position 0) cannot be concatenated");
    dim = at::maybe_wrap_dim(dim, first.dim());
    std::vector<int64_t> shape = first.sizes().vec();
    int64_t total = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
        const at::Tensor& t = parts[i];
        TORCH_CHECK(t.dim() == first.dim(), "Tensors must have same number of dimensions: got ", first.dim(),
                    " and ", t.dim());
        TORCH_CHECK(t.device() == out.device(), "Expected all tensors to be on the same device, but got tensor ", i,
                    " on ", t.device(), " and out on ", out.device());
        for (int64_t d = 0; d < first.dim(); ++d)
            TORCH_CHECK(d == dim || t.size(d) == first.size(d), "Sizes of tensors must match except in dimension ",
                        dim, ". Expected size ", first.size(d), " but got size ", t.size(d), " for tensor number ", i,
                        " in the list.");
        total += t.size(dim);
    }
    shape[size_t(dim)] = total;
    at::native::resize_output(out, shape);
    int64_t offset = 0;
    for (const at::Tensor& t : parts) {
        if (t.numel() > 0) native_copy(out.narrow(dim, offset, t.size(dim)), t);
        offset += t.size(dim);
    }
    return out;
}

}  // namespace

// ---- copies and fill (used by sol_torch_ve.cpp's copy_ and fill_) -------------------------------------------------

void native_copy(const at::Tensor& dst, const at::Tensor& src) {
    if (dst.numel() == 0) return;
    auto iter = at::TensorIteratorConfig().set_check_mem_overlap(true).check_all_same_dtype(false)
                    .resize_outputs(false).add_output(dst).add_const_input(src).build();
    at::ScalarType a = dst.scalar_type(), b = src.scalar_type();
    int64_t compute = !at::isFloatingType(a) && !at::isFloatingType(b) ? SOL_VE_COMPUTE_I64
                      : (a == at::kFloat && b == at::kFloat) ? SOL_VE_COMPUTE_F32 : SOL_VE_COMPUTE_F64;
    run(iter, SOL_VE_COPY, compute);
}

at::Tensor& native_fill(at::Tensor& self, const at::Scalar& value) {
    auto iter = at::TensorIteratorConfig().set_check_mem_overlap(false).check_all_same_dtype(false)
                    .resize_outputs(false).add_output(self).build();
    run(iter, SOL_VE_FILL, compute_code(self.scalar_type()), {value});
    return self;
}

}  // namespace sol_ve

using namespace sol_ve;

TORCH_LIBRARY_IMPL(aten, VE, m) {
    m.impl("add.out", TORCH_FN(add_out));
    m.impl("sub.out", TORCH_FN(sub_out));
    m.impl("mul.out", TORCH_FN(mul_out));
    m.impl("div.out", TORCH_FN(div_out));
    m.impl("div.out_mode", TORCH_FN(div_mode_out));
    m.impl("floor_divide", TORCH_FN(ve_floor_divide));
    m.impl("floor_divide.out", TORCH_FN(ve_floor_divide_out));
    m.impl("floor_divide_.Tensor", TORCH_FN(ve_floor_divide_));
    m.impl("maximum.out", TORCH_FN(maximum_out));
    m.impl("minimum.out", TORCH_FN(minimum_out));
    m.impl("eq.Tensor_out", TORCH_FN(eq_tensor_out));
    m.impl("eq.Scalar_out", TORCH_FN(eq_scalar_out));
    m.impl("ne.Tensor_out", TORCH_FN(ne_tensor_out));
    m.impl("ne.Scalar_out", TORCH_FN(ne_scalar_out));
    m.impl("lt.Tensor_out", TORCH_FN(lt_tensor_out));
    m.impl("lt.Scalar_out", TORCH_FN(lt_scalar_out));
    m.impl("le.Tensor_out", TORCH_FN(le_tensor_out));
    m.impl("le.Scalar_out", TORCH_FN(le_scalar_out));
    m.impl("gt.Tensor_out", TORCH_FN(gt_tensor_out));
    m.impl("gt.Scalar_out", TORCH_FN(gt_scalar_out));
    m.impl("ge.Tensor_out", TORCH_FN(ge_tensor_out));
    m.impl("ge.Scalar_out", TORCH_FN(ge_scalar_out));
    m.impl("logical_and.out", TORCH_FN(logical_and_out));
    m.impl("logical_or.out", TORCH_FN(logical_or_out));
    m.impl("logical_xor.out", TORCH_FN(logical_xor_out));
    m.impl("logical_not.out", TORCH_FN(logical_not_out));
    m.impl("bitwise_and.Tensor_out", TORCH_FN(bitwise_and_out));
    m.impl("bitwise_or.Tensor_out", TORCH_FN(bitwise_or_out));
    m.impl("bitwise_xor.Tensor_out", TORCH_FN(bitwise_xor_out));
    m.impl("bitwise_not.out", TORCH_FN(bitwise_not_out));
    m.impl("neg.out", TORCH_FN(neg_out));
    m.impl("abs.out", TORCH_FN(abs_out));
    m.impl("ceil.out", TORCH_FN(ceil_out));
    m.impl("floor.out", TORCH_FN(floor_out));
    m.impl("sqrt.out", TORCH_FN(sqrt_out));
    m.impl("exp.out", TORCH_FN(exp_out));
    m.impl("log.out", TORCH_FN(log_out));
    m.impl("reciprocal.out", TORCH_FN(reciprocal_out));
    m.impl("clamp.out", TORCH_FN(clamp_out));
    m.impl("clamp.Tensor_out", TORCH_FN(clamp_tensor_out));
    m.impl("clamp_min.out", TORCH_FN(clamp_min_out));
    m.impl("clamp_max.out", TORCH_FN(clamp_max_out));
    m.impl("clamp_min.Tensor_out", TORCH_FN(clamp_min_tensor_out));
    m.impl("clamp_max.Tensor_out", TORCH_FN(clamp_max_tensor_out));
    m.impl("pow.Tensor_Scalar_out", TORCH_FN(pow_tensor_scalar_out));
    m.impl("pow.Tensor_Tensor_out", TORCH_FN(pow_tensor_tensor_out));
    m.impl("pow.Scalar_out", TORCH_FN(pow_scalar_out));
    m.impl("where.self_out", TORCH_FN(where_out));
    m.impl("where.self", TORCH_FN(where_self));
    m.impl("masked_fill_.Scalar", TORCH_FN(masked_fill_scalar));
    m.impl("masked_fill_.Tensor", TORCH_FN(masked_fill_tensor));
    m.impl("lerp.Scalar_out", TORCH_FN(lerp_scalar_out));
    m.impl("lerp.Tensor_out", TORCH_FN(lerp_tensor_out));
    m.impl("addcmul.out", TORCH_FN(addcmul_out));
    m.impl("addcdiv.out", TORCH_FN(addcdiv_out));
    m.impl("sum.IntList_out", TORCH_FN(sum_out));
    m.impl("mean.out", TORCH_FN(mean_out));
    m.impl("min", TORCH_FN(min_all));
    m.impl("max", TORCH_FN(max_all));
    m.impl("max.dim_max", TORCH_FN(max_dim_out));
    m.impl("min.dim_min", TORCH_FN(min_dim_out));
    m.impl("amax.out", TORCH_FN(amax_out));
    m.impl("amin.out", TORCH_FN(amin_out));
    m.impl("cat.out", TORCH_FN(cat_out));
}
