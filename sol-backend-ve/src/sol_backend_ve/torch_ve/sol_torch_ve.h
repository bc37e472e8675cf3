// What the two halves of PyTorch's VE device share: the device basics (sol_torch_ve.cpp: VEDA, allocator, copies,
// kernel launches, the CPU fallback) and the native ops (native_ops.cpp: TensorIterator set-up, descriptors).
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Scalar.h>

#include <cstddef>
#include <cstdint>

#include "ve_kernels.h"

namespace sol_ve {

// VEDA's kernel handle (passed by value to vedaLaunchKernelEx; the same layout in NEC's libveda and the emulator's).
struct VeFunction {
    uint64_t ptr;
    const char* kernel;
};

enum class KernelKind { elementwise, reduction };

// Queue one kernel of the VE kernel library on ``device`` (stream 0, in order with copies); ``descriptor`` is copied
// at the call, so it may live on the caller's stack.
void launch(int device, KernelKind kind, void* descriptor, size_t bytes);

// Whether the VE kernels read and write this element type (others take the CPU fallback).
bool native_dtype(at::ScalarType type);

// dst = src on the VE (both VE tensors of native dtypes; src broadcasts to dst, dtypes convert).
void native_copy(const at::Tensor& dst, const at::Tensor& src);

// self.fill_(value) on the VE (a native dtype).
at::Tensor& native_fill(at::Tensor& self, const at::Scalar& value);

// The boxed CPU fallback (asks Python's policy first: it warns once per op, or refuses).
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace sol_ve
