// PyTorch's VE device over VEDA: allocator, device guard, tensor basics, copies, the VE kernel module and a CPU
// fallback (the native ops themselves are in native_ops.cpp).
//
// libveda is dlopen'ed from the path sol_backend_ve.veda.find_library() gives (NEC's, or SOL's emulated VE), the
// same library the Python binding drives, so both share one context and stream 0. A VE tensor's data_ptr() is the
// raw VE address (vedaMemPtr): generated code reads it from pointer tables as it is. Copies need VEDA's virtual
// pointer, found again from the allocation that holds the address.

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/library.h>

#include "sol_torch_ve.h"

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace py = pybind11;

namespace sol_ve {

constexpr c10::DeviceType kVE = c10::DeviceType::VE;
constexpr int kMaxDevices = 8;

struct Veda {
    int (*Init)(uint32_t) = nullptr;
    int (*DeviceGetCount)(int*) = nullptr;
    int (*DeviceGet)(int*, int) = nullptr;
    int (*PrimaryCtxRetain)(void**, int) = nullptr;
    int (*CtxSetCurrent)(void*) = nullptr;
    int (*StreamSynchronize)(int) = nullptr;
    int (*MemAllocAsync)(uint64_t*, size_t, int) = nullptr;
    int (*MemFreeAsync)(uint64_t, int) = nullptr;
    int (*MemPtr)(void**, uint64_t) = nullptr;
    int (*MemcpyHtoD)(uint64_t, const void*, size_t) = nullptr;
    int (*MemcpyDtoH)(void*, uint64_t, size_t) = nullptr;
    int (*MemcpyDtoDAsync)(uint64_t, uint64_t, size_t, int) = nullptr;
    int (*GetErrorName)(int, const char**) = nullptr;
    int (*GetErrorString)(int, const char**) = nullptr;
    int (*EmuLastError)(const char**) = nullptr;  // only SOL's emulated VE has it
    int (*ModuleLoad)(void**, const char*) = nullptr;
    int (*ModuleGetFunction)(VeFunction*, void*, const char*) = nullptr;
    int (*ArgsCreate)(void**) = nullptr;
    int (*ArgsSetStack)(void*, int, void*, int, size_t) = nullptr;
    int (*LaunchKernelEx)(VeFunction, int, void*, int, uint64_t*) = nullptr;
    std::vector<void*> contexts;
    int count = 0;
    bool emulated = false;
};

Veda g_veda;
// The native kernels (ve_kernels.cpp), loaded into each VE's context by init().
struct Kernels {
    VeFunction elementwise{0, nullptr};
    VeFunction reduction{0, nullptr};
};
Kernels g_kernels[kMaxDevices];
std::atomic<bool> g_ready{false};
std::atomic<int64_t> g_allocated[kMaxDevices];
thread_local int t_device = 0;        // torch's current VE of this thread
thread_local int t_context = -1;      // the VE whose context VEDA has current on this thread
PyObject* g_policy = nullptr;         // Python: fallback policy(op name) -> None (run on the CPU) or an error message

std::string device_label(int device) {
    return "ve:" + std::to_string(device) + (g_veda.emulated ? " (emulated)" : "");
}

void check(int rc, const char* call, int device, const std::string& what = "") {
    if (rc == 0) return;
    const char* name = "VEDA_ERROR";
    const char* text = "";
    if (g_veda.GetErrorName) g_veda.GetErrorName(rc, &name);
    if (g_veda.GetErrorString) g_veda.GetErrorString(rc, &text);
    std::string detail;
    if (g_veda.EmuLastError) {
        const char* d = nullptr;
        g_veda.EmuLastError(&d);
        if (d && *d) detail = std::string("; ") + d;
    }
    TORCH_CHECK(false, device_label(device), ": ", call, what.empty() ? "" : " (" + what + ")", " failed with ", name,
                ": ", text, detail);
}

void require_ready() {
    TORCH_CHECK(g_ready.load(), "the VE is not initialised: import sol_backend_ve's torch support first "
                "(torch.ve.is_available() says whether a VE can be used)");
}

void use_context(int device) {
    require_ready();
    TORCH_CHECK(device >= 0 && device < g_veda.count, "ve:", device, " does not exist (", g_veda.count, " VE(s))");
    if (t_context != device) {
        check(g_veda.CtxSetCurrent(g_veda.contexts[device]), "vedaCtxSetCurrent", device);
        t_context = device;
    }
}

// ---- the allocator ----------------------------------------------------------------------------------------------

struct Block {
    uint64_t vptr;
    char* raw;
    size_t size;
    int device;
};

std::mutex g_blocks_mutex;
std::map<uintptr_t, Block*> g_blocks;  // raw address -> allocation (copies need the virtual pointer)

void free_block(void* context) {
    auto* block = static_cast<Block*>(context);
    {
        std::lock_guard<std::mutex> lock(g_blocks_mutex);
        g_blocks.erase(reinterpret_cast<uintptr_t>(block->raw));
    }
    g_allocated[block->device] -= int64_t(block->size);
    if (g_ready.load() && Py_IsInitialized()) {
        try {
            use_context(block->device);
            g_veda.MemFreeAsync(block->vptr, 0);  // a VE lost at exit has nothing left to free
        } catch (...) {
        }
    }
    delete block;
}

void no_delete(void*) {}

// The virtual pointer of a raw VE address (inside an allocation of ours, ``nbytes`` of it).
uint64_t vptr_of(const void* address, size_t nbytes, int* device = nullptr) {
    auto at = reinterpret_cast<uintptr_t>(address);
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto it = g_blocks.upper_bound(at);
    TORCH_CHECK(it != g_blocks.begin(), "address ", address, " is not VE memory allocated by PyTorch");
    --it;
    Block* block = it->second;
    TORCH_CHECK(at + nbytes <= it->first + block->size, "address ", address, " (+", nbytes,
                " bytes) is not inside a VE allocation");
    if (device) *device = block->device;
    return block->vptr + (at - it->first);
}

struct VeAllocator final : c10::Allocator {
    c10::DataPtr allocate(size_t nbytes) override {
        int device = t_device;
        if (nbytes == 0) return {nullptr, nullptr, &no_delete, c10::Device(kVE, device)};
        use_context(device);
        uint64_t vptr = 0;
        check(g_veda.MemAllocAsync(&vptr, nbytes, 0), "vedaMemAllocAsync", device, std::to_string(nbytes) + " bytes");
        void* raw = nullptr;
        check(g_veda.MemPtr(&raw, vptr), "vedaMemPtr", device);
        auto* block = new Block{vptr, static_cast<char*>(raw), nbytes, device};
        {
            std::lock_guard<std::mutex> lock(g_blocks_mutex);
            g_blocks[reinterpret_cast<uintptr_t>(raw)] = block;
        }
        g_allocated[device] += int64_t(nbytes);
        return {raw, block, &free_block, c10::Device(kVE, device)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
    void copy_data(void* dest, const void* src, std::size_t count) const override {
        if (count == 0) return;
        int device = 0;
        uint64_t d = vptr_of(dest, count, &device), s = vptr_of(src, count);
        use_context(device);
        check(g_veda.MemcpyDtoDAsync(d, s, count, 0), "vedaMemcpyDtoDAsync", device);
    }
};

VeAllocator g_allocator;

// Makes ``device`` the current VE for one scope (kernels called with an explicit device).
struct DeviceScope {
    int previous;
    explicit DeviceScope(std::optional<c10::Device> device) : previous(t_device) {
        if (device && device->has_index()) t_device = device->index();
    }
    ~DeviceScope() { t_device = previous; }
};

int device_of(const at::Tensor& t) { return t.device().has_index() ? t.device().index() : t_device; }

// ---- the device guard -------------------------------------------------------------------------------------------

struct VeGuard final : c10::impl::DeviceGuardImplInterface {
    c10::DeviceType type() const override { return kVE; }
    c10::Device exchangeDevice(c10::Device d) const override {
        auto old = getDevice();
        setDevice(d);
        return old;
    }
    c10::Device getDevice() const override { return c10::Device(kVE, c10::DeviceIndex(t_device)); }
    void setDevice(c10::Device d) const override {
        TORCH_CHECK(d.type() == kVE, "expected a VE device, got ", d);
        if (d.has_index()) t_device = d.index();
    }
    void uncheckedSetDevice(c10::Device d) const noexcept override {
        if (d.has_index()) t_device = d.index();
    }
    c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
    c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
    c10::Stream exchangeStream(c10::Stream s) const override { return c10::Stream(c10::Stream::DEFAULT, s.device()); }
    c10::DeviceIndex deviceCount() const noexcept override { return g_ready.load() ? g_veda.count : 0; }
    // One in-order stream per VE: work issued later runs later, events have nothing to wait for.
    void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
    void block(void*, const c10::Stream&) const override {}
    bool queryEvent(void*) const override { return true; }
    void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
    bool queryStream(const c10::Stream&) const override { return true; }
    void synchronizeStream(const c10::Stream& s) const override { synchronizeDevice(s.device_index()); }
    void synchronizeDevice(const c10::DeviceIndex index) const override {
        int device = index >= 0 ? index : t_device;
        use_context(device);
        check(g_veda.StreamSynchronize(0), "vedaStreamSynchronize", device);
    }
    void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(VE, VeGuard);

// ---- copies -----------------------------------------------------------------------------------------------------

// Every host<->VE transfer, fallback ones included (copy_counters() in Python): tests and users see what crossed.
std::atomic<int64_t> g_to_ve_copies{0}, g_to_ve_bytes{0}, g_to_cpu_copies{0}, g_to_cpu_bytes{0};

void htod(void* dst, const void* src, size_t n) {
    if (n == 0) return;
    g_to_ve_copies += 1;
    g_to_ve_bytes += int64_t(n);
    int device = 0;
    uint64_t d = vptr_of(dst, n, &device);
    use_context(device);
    check(g_veda.MemcpyHtoD(d, src, n), "vedaMemcpyHtoD", device, std::to_string(n) + " bytes");
}

void dtoh(void* dst, const void* src, size_t n) {
    if (n == 0) return;
    g_to_cpu_copies += 1;
    g_to_cpu_bytes += int64_t(n);
    int device = 0;
    uint64_t s = vptr_of(src, n, &device);
    use_context(device);
    check(g_veda.MemcpyDtoH(dst, s, n), "vedaMemcpyDtoH", device, std::to_string(n) + " bytes");
}

void dtod(void* dst, const void* src, size_t n) { g_allocator.copy_data(dst, src, n); }

size_t span_bytes(const at::Tensor& t) {
    if (t.numel() == 0) return 0;
    return at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.itemsize());
}

bool dense(const at::Tensor& t) { return t.is_contiguous(); }

// Whether no two elements share memory (the VE kernels can write it through its strides).
bool writable_by_kernels(const at::Tensor& t) { return at::has_internal_overlap(t) != at::MemOverlap::Yes; }

// The bytes a VE tensor spans, on the host, viewed with its sizes and strides.
at::Tensor host_view(const at::Tensor& t) {
    size_t span = span_bytes(t);
    auto buffer = at::empty({int64_t(span / t.itemsize())}, t.options().device(at::kCPU));
    dtoh(buffer.data_ptr(), t.data_ptr(), span);
    return buffer.as_strided(t.sizes(), t.strides(), 0);
}

// dst (VE) = src (CPU): the bytes cross once, contiguous in dst's dtype; broadcasting, dtype conversion and dst's
// strides are then handled on the VE (native_copy).
void write_from_host(const at::Tensor& dst, const at::Tensor& src) {
    if (dense(dst) && dense(src) && src.dtype() == dst.dtype() && src.sizes() == dst.sizes()) {
        htod(dst.data_ptr(), src.data_ptr(), dst.nbytes());
        return;
    }
    at::Tensor host = src.to(dst.scalar_type());
    if (!native_dtype(dst.scalar_type()) || !writable_by_kernels(dst)) {
        // read, modify, write the bytes dst spans (a dtype the VE kernels do not know, or an overlapping view)
        at::Tensor view = host_view(dst);
        view.copy_(host);
        htod(dst.data_ptr(), view.data_ptr(), span_bytes(dst));
        return;
    }
    host = host.expand(dst.sizes()).contiguous();
    if (dense(dst)) {
        htod(dst.data_ptr(), host.data_ptr(), dst.nbytes());
        return;
    }
    at::Tensor staged = at::empty(dst.sizes(), dst.options());
    htod(staged.data_ptr(), host.data_ptr(), staged.nbytes());
    native_copy(dst, staged);
}

at::Tensor& copy_impl(at::Tensor& self, const at::Tensor& src) {
    if (self.numel() == 0) return self;
    TORCH_CHECK((self.is_cpu() || self.device().type() == kVE) && (src.is_cpu() || src.device().type() == kVE),
                "copy_ between ", src.device(), " and ", self.device(), " is not supported: go through the CPU");
    bool same = src.dtype() == self.dtype() && src.sizes() == self.sizes() && dense(self) && dense(src);
    bool native = native_dtype(self.scalar_type()) && native_dtype(src.scalar_type());
    if (self.device().type() == kVE) {
        if (src.device().type() == kVE) {
            if (same) dtod(self.data_ptr(), src.data_ptr(), self.nbytes());
            else if (native && writable_by_kernels(self)) native_copy(self, src);
            else write_from_host(self, host_view(src));
        } else {
            write_from_host(self, src);
        }
    } else if (same) {
        dtoh(self.data_ptr(), src.data_ptr(), self.nbytes());
    } else if (native && !dense(src)) {
        // made contiguous on the VE first: only the tensor's own elements cross, once
        at::Tensor packed = at::empty(src.sizes(), src.options());
        native_copy(packed, src);
        at::Tensor host = at::empty(src.sizes(), src.options().device(at::kCPU));
        dtoh(host.data_ptr(), packed.data_ptr(), packed.nbytes());
        self.copy_(host);
    } else {
        self.copy_(host_view(src));
    }
    return self;
}

// ---- kernels ----------------------------------------------------------------------------------------------------

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device> device, std::optional<bool>,
                               std::optional<at::MemoryFormat> memory_format) {
    DeviceScope scope(device);
    return at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::VE),
                                     c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<at::Device> device, std::optional<bool>) {
    DeviceScope scope(device);
    return at::detail::empty_strided_generic(size, stride, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::VE),
                                             c10::dtype_or_default(dtype));
}

const at::Tensor& resize_(const at::Tensor& self, at::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
    auto* impl = self.unsafeGetTensorImpl();
    if (self.sizes() != size || !self.is_contiguous()) impl->set_sizes_contiguous(size);
    if (memory_format && *memory_format != at::MemoryFormat::Preserve) impl->empty_tensor_restride(*memory_format);
    if (self.numel() == 0) return self;
    size_t needed = at::detail::computeStorageNbytesContiguous(size, self.itemsize(), self.storage_offset());
    auto& storage = impl->unsafe_storage();
    if (needed > storage.nbytes()) {
        DeviceScope scope(self.device());
        auto old_bytes = storage.nbytes();
        c10::DataPtr fresh = g_allocator.allocate(needed);
        if (old_bytes && storage.data()) dtod(fresh.get(), storage.data(), old_bytes);
        storage.set_data_ptr_noswap(std::move(fresh));
        storage.set_nbytes(needed);
    }
    return self;
}

// self becomes a view of ``source`` (a VE storage): storage copies (torch.save's storage.cpu()) and set_() need it.
at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset, c10::SymIntArrayRef size,
                               c10::SymIntArrayRef stride) {
    TORCH_CHECK(source.device().type() == kVE, "set_: expected a VE storage for a VE tensor, got one on ",
                source.device());
    TORCH_CHECK(stride.empty() || stride.size() == size.size(), "set_: ", size.size(), " sizes but ", stride.size(),
                " strides");
    auto sizes = C10_AS_INTARRAYREF_SLOW(size);
    auto* impl = self.unsafeGetTensorImpl();
    impl->set_storage_keep_dtype(std::move(source));
    impl->set_storage_offset(offset.expect_int());
    if (stride.empty()) impl->set_sizes_contiguous(sizes);
    else impl->set_sizes_and_strides(sizes, C10_AS_INTARRAYREF_SLOW(stride));
    size_t needed = self.numel() == 0 ? 0
                    : at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.itemsize(),
                                                       self.storage_offset());
    TORCH_CHECK(needed <= self.storage().nbytes(), "set_: the view needs ", needed, " bytes of a ",
                self.storage().nbytes(), "-byte VE storage");
    return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
    int64_t elements = int64_t(source.nbytes() / self.dtype().itemsize());
    return set_storage_offset(self, std::move(source), 0, c10::SymIntArrayRef({c10::SymInt(elements)}), {});
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool) { return copy_impl(self, src); }

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
    at::Tensor out = dst;
    return copy_impl(out, self);
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
    at::Tensor out = dst;
    if (out.sizes() != self.sizes()) {
        if (out.device().type() == kVE) resize_(out, self.sizes(), std::nullopt);
        else out.resize_(self.sizes());
    }
    return copy_impl(out, self);
}

at::Scalar _local_scalar_dense(const at::Tensor& self) { return at::_local_scalar_dense(host_view(self)); }

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
    if (self.numel() == 0) return self;
    if (native_dtype(self.scalar_type())) return native_fill(self, value);
    write_from_host(self, at::full(self.sizes(), value, self.options().device(at::kCPU)));
    return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
    TORCH_CHECK(value.dim() == 0, "fill_ only supports a 0-dimensional value tensor, got ", value.dim(), " dims");
    return fill_scalar(self, value.item());
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

// ---- the CPU fallback -------------------------------------------------------------------------------------------

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    const auto& name = op.schema().operator_name();
    std::string full = name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
    if (g_policy != nullptr && Py_IsInitialized()) {
        std::string refusal;
        {
            py::gil_scoped_acquire gil;
            py::object answer = py::reinterpret_borrow<py::object>(g_policy)(full);
            if (!answer.is_none()) refusal = answer.cast<std::string>();
        }
        TORCH_CHECK_NOT_IMPLEMENTED(refusal.empty(), refusal);
    }
    at::native::cpu_fallback(op, stack);
}

// ---- launching the native kernels ------------------------------------------------------------------------------

void launch(int device, KernelKind kind, void* descriptor, size_t bytes) {
    use_context(device);
    const Kernels& k = g_kernels[device];
    VeFunction f = kind == KernelKind::elementwise ? k.elementwise : k.reduction;
    TORCH_CHECK(f.ptr != 0, device_label(device), ": the VE kernel library is not loaded");
    void* args = nullptr;
    check(g_veda.ArgsCreate(&args), "vedaArgsCreate", device);
    check(g_veda.ArgsSetStack(args, 0, descriptor, 0 /* VEDA_ARGS_INTENT_IN: copied now */, bytes),
          "vedaArgsSetStack", device);
    check(g_veda.LaunchKernelEx(f, 0, args, 1 /* destroy the args */, nullptr), "vedaLaunchKernelEx", device,
          f.kernel ? f.kernel : "");
}

}  // namespace sol_ve

using namespace sol_ve;

TORCH_LIBRARY_IMPL(aten, VE, m) {
    m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
    m.impl("empty_strided", TORCH_FN(empty_strided));
    m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
    m.impl("view", TORCH_FN(at::native::view));
    m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
    m.impl("resize_", TORCH_FN(resize_));
    m.impl("set_.source_Storage", TORCH_FN(set_storage));
    m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
    m.impl("copy_", TORCH_FN(copy_));
    m.impl("_copy_from", TORCH_FN(_copy_from));
    m.impl("_copy_from_and_resize", TORCH_FN(_copy_from_and_resize));
    m.impl("_local_scalar_dense", TORCH_FN(_local_scalar_dense));
    m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
    m.impl("fill_.Tensor", TORCH_FN(fill_tensor));
    m.impl("zero_", TORCH_FN(zero_));
}

TORCH_LIBRARY_IMPL(_, VE, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>()); }

// Composite kernels that pick a backend themselves and end in a "not implemented" stub for any device but CPU/CUDA:
// the CPU fallback takes them whole.
TORCH_LIBRARY_IMPL(aten, VE, m) {
    for (const char* op : {"convolution", "convolution_backward"})
        m.impl(op, torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// ---- Python -----------------------------------------------------------------------------------------------------

namespace {

template <typename F>
void bind(void* lib, const char* name, F& fn, bool required = true) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    TORCH_CHECK(fn || !required, "libveda has no ", name);
}

void load_kernels(int device, const std::string& kernels) {
    use_context(device);
    void* module = nullptr;
    check(g_veda.ModuleLoad(&module, kernels.c_str()), "vedaModuleLoad", device, kernels);
    VeFunction abi{0, nullptr};
    check(g_veda.ModuleGetFunction(&abi, module, "sol_ve_kernels_abi"), "vedaModuleGetFunction", device,
          "sol_ve_kernels_abi");
    uint64_t version = 0;
    void* args = nullptr;
    check(g_veda.ArgsCreate(&args), "vedaArgsCreate", device);
    check(g_veda.LaunchKernelEx(abi, 0, args, 1, &version), "vedaLaunchKernelEx", device, "sol_ve_kernels_abi");
    check(g_veda.StreamSynchronize(0), "vedaStreamSynchronize", device);
    TORCH_CHECK(version == SOL_VE_KERNELS_ABI, kernels, " has kernel ABI ", version, ", this extension expects ",
                SOL_VE_KERNELS_ABI, ": clear SOL's cache (sol cache clear)");
    Kernels& k = g_kernels[device];
    check(g_veda.ModuleGetFunction(&k.elementwise, module, "sol_ve_elementwise_kernel"), "vedaModuleGetFunction",
          device, "sol_ve_elementwise_kernel");
    check(g_veda.ModuleGetFunction(&k.reduction, module, "sol_ve_reduction_kernel"), "vedaModuleGetFunction",
          device, "sol_ve_reduction_kernel");
}

int init(const std::string& path, const std::string& kernels, py::object policy) {
    if (g_ready.load()) return g_veda.count;
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    TORCH_CHECK(lib, "cannot load ", path, ": ", dlerror());
    Veda& v = g_veda;
    bind(lib, "vedaInit", v.Init);
    bind(lib, "vedaDeviceGetCount", v.DeviceGetCount);
    bind(lib, "vedaDeviceGet", v.DeviceGet);
    bind(lib, "vedaDevicePrimaryCtxRetain", v.PrimaryCtxRetain);
    bind(lib, "vedaCtxSetCurrent", v.CtxSetCurrent);
    bind(lib, "vedaStreamSynchronize", v.StreamSynchronize);
    bind(lib, "vedaMemAllocAsync", v.MemAllocAsync);
    bind(lib, "vedaMemFreeAsync", v.MemFreeAsync);
    bind(lib, "vedaMemPtr", v.MemPtr);
    bind(lib, "vedaMemcpyHtoD", v.MemcpyHtoD);
    bind(lib, "vedaMemcpyDtoH", v.MemcpyDtoH);
    bind(lib, "vedaMemcpyDtoDAsync", v.MemcpyDtoDAsync);
    bind(lib, "vedaGetErrorName", v.GetErrorName);
    bind(lib, "vedaGetErrorString", v.GetErrorString);
    bind(lib, "solVedaEmuLastError", v.EmuLastError, false);
    bind(lib, "vedaModuleLoad", v.ModuleLoad);
    bind(lib, "vedaModuleGetFunction", v.ModuleGetFunction);
    bind(lib, "vedaArgsCreate", v.ArgsCreate);
    bind(lib, "vedaArgsSetStack", v.ArgsSetStack);
    bind(lib, "vedaLaunchKernelEx", v.LaunchKernelEx);
    v.emulated = v.EmuLastError != nullptr;
    int rc = v.Init(0);
    if (rc != 1) check(rc, "vedaInit", 0);  // 1: VEDA_ERROR_ALREADY_INITIALIZED (the Python binding did it)
    check(v.DeviceGetCount(&v.count), "vedaDeviceGetCount", 0);
    TORCH_CHECK(v.count > 0, "libveda (", path, ") sees no VE");
    v.count = std::min(v.count, kMaxDevices);
    for (int i = 0; i < v.count; ++i) {
        int handle = 0;
        void* context = nullptr;
        check(v.DeviceGet(&handle, i), "vedaDeviceGet", i);
        check(v.PrimaryCtxRetain(&context, handle), "vedaDevicePrimaryCtxRetain", i);
        v.contexts.push_back(context);
    }
    g_ready = true;  // use_context needs it
    try {
        for (int i = 0; i < v.count; ++i) load_kernels(i, kernels);
    } catch (...) {
        g_ready = false;
        throw;
    }
    g_policy = policy.release().ptr();  // kept for the process's life
    g_ready = true;
    return v.count;
}

// PyTorch's autograd engine sizes its per-device worker queues once, at the process's first backward, from the
// device counts its guards report then. A VE started after that has no queue: a backward through VE tensors hits
// an internal assert in the engine. The engine keeps the queues protected; a derived class may name them.
struct EngineQueues : torch::autograd::Engine {
    // -1: no backward has run yet (the engine will see the VE's guard when it starts)
    static int count(torch::autograd::Engine& engine) {
        if (!(engine.*(&EngineQueues::thread_pool_shared_))) return -1;
        return static_cast<int>((engine.*(&EngineQueues::device_ready_queues_)).size());
    }
};

int checked_device(int device) {
    require_ready();
    int d = device < 0 ? t_device : device;
    TORCH_CHECK(d < g_veda.count, "ve:", d, " does not exist (", g_veda.count, " VE(s))");
    return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "SOL's PyTorch VE device (allocator, guard, copies, CPU fallback)";
    m.def("init", &init, "load libveda from a path, the VE kernel library into each VE, and register the VE(s); "
          "returns the device count");
    m.def("device_count", []() { return g_ready.load() ? g_veda.count : 0; });
    m.def("current_device", []() { return t_device; });
    m.def("set_device", [](int device) { t_device = checked_device(device); });
    m.def("synchronize", [](int device) {
        py::gil_scoped_release nogil;
        int d = checked_device(device);
        use_context(d);
        check(g_veda.StreamSynchronize(0), "vedaStreamSynchronize", d);
    });
    m.def("memory_allocated", [](int device) { return g_allocated[checked_device(device)].load(); });
    m.def("virtual_pointer", [](uintptr_t address) { return vptr_of(reinterpret_cast<void*>(address), 0); },
          "VEDA's virtual pointer of a VE tensor's data_ptr()");
    m.def("emulated", []() { return g_veda.emulated; });
    m.def("autograd_device_queues", []() { return EngineQueues::count(torch::autograd::Engine::get_default_engine()); },
          "the autograd engine's per-device queues (-1 while no backward has run in this process)");
    m.def("copy_counters", []() {
        py::dict d;
        d["to_ve_copies"] = g_to_ve_copies.load();
        d["to_ve_bytes"] = g_to_ve_bytes.load();
        d["to_cpu_copies"] = g_to_cpu_copies.load();
        d["to_cpu_bytes"] = g_to_cpu_bytes.load();
        return d;
    }, "host<->VE transfers so far: {to_ve,to_cpu}_{copies,bytes}");
    m.def("reset_copy_counters", []() {
        g_to_ve_copies = 0;
        g_to_ve_bytes = 0;
        g_to_cpu_copies = 0;
        g_to_cpu_bytes = 0;
    });
}
