// The native helper of a compiled model's calls: the per-call parameter check, and the whole inference call.
//
// A compiled model checks all its parameters on every call (has one been
// written in place, or replaced?). In Python that is two attribute reads per
// tensor, 0.3 us each right after a model run has left the interpreter's data
// out of the caches: 80-160 us a call for MobileNetV2's 262 tensors, 4-8% of
// its run. sol_read_tensors does the same in under 10 us.
//
// sol_fast_forward (fast_call.py) goes further: the input check, the
// parameter check, the output's allocation and the model's forward of a plain
// inference call (one float32 CPU tensor in and out, no autograd, no autocast),
// without the Python steps of SolModule.forward between them. Each of those
// steps pays for the caches a model run has just evicted: the module's call
// took 116 us (squeezenet1_1) to 470 us (resnet50) longer than the forward
// itself. Anything it does not handle it leaves to that Python path, which
// explains errors and re-prepares changed parameters.
//
// Built by native_reader.py against the installed torch's headers and checked
// against Python's own _version and data_ptr() before it is used.
#include <Python.h>

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/python_variable.h>  // THPVariable_Unpack, _Wrap (most of the build time: pybind11)

#include <utility>

// For each tensor of `tensors` (a list of torch.Tensor): its version into
// versions[i] and its data address into pointers[i]. Returns how many entries
// changed, or -1 when a tensor has no readable version or storage (inference
// tensors, wrapper subclasses): the caller then asks Python, which explains.
extern "C" long sol_read_tensors(PyObject* tensors, int64_t* versions, void** pointers) noexcept {
  const Py_ssize_t count = PyList_GET_SIZE(tensors);
  long changed = 0;
  try {  // a throwing accessor (a fake or functional tensor) must not unwind into ctypes
    for (Py_ssize_t i = 0; i < count; ++i) {
      const at::Tensor& tensor = THPVariable_Unpack(PyList_GET_ITEM(tensors, i));
      const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
      if (!impl->version_counter().enabled() || !impl->has_storage() || !impl->dtype_initialized()) {
        return -1;
      }
      const int64_t version = static_cast<int64_t>(impl->version_counter().current_version());
      // the const read: unlike data_ptr(), it never materializes a copy-on-write storage
      const char* base = static_cast<const char*>(impl->storage().data());
      if (base == nullptr) {
        return -1;
      }
      void* pointer = const_cast<char*>(base) + impl->storage_offset() * static_cast<int64_t>(impl->itemsize());
      changed += (version != versions[i]) + (pointer != pointers[i]);
      versions[i] = version;
      pointers[i] = pointer;
    }
  } catch (...) {
    return -1;
  }
  return changed;
}

// A model's forward as generated code exports it: derived parameters, input, parameter and output pointers,
// workspace, batch; 0 on success.
typedef int (*sol_forward_fn)(void* derived, void* const* inputs, void* const* params, void* const* outputs,
                              void* workspace, int64_t batch);

// One compiled model's plain inference call, as fast_call.py fills it (its ctypes Structure must match). The
// Python objects are borrowed: the FastCall that owns this struct keeps them alive.
struct sol_fast_call {
  const int64_t* enabled;       // sol.config["pytorch::fast_call"], followed by fast_call.py
  sol_forward_fn forward;
  void* derived;
  void* workspace;              // the model's workspace for `batch`
  void* const* params;          // the prepared parameter pointers
  const int64_t* versions;      // each parameter's version when they were prepared
  void* const* pointers;        // and its data address then (the same as params)
  PyObject* tensors;            // list of the parameter tensors, in the model's order
  PyObject* lock;               // the model's threading.Lock (it guards the workspace)
  PyObject* listeners;          // the model's run listeners (debug, profiling): the call is left to Python if any
  PyObject* assignments;        // params._ASSIGNMENTS: [module tensor assignments so far]
  int64_t assigned;             // its count when `tensors` were found
  int64_t batch;
  int64_t input_ndim;
  int64_t input_sizes[8];
  int64_t output_ndim;
  int64_t output_sizes[8];
};

extern "C" int64_t sol_fast_call_size(void) noexcept { return static_cast<int64_t>(sizeof(sol_fast_call)); }

// The output tensor of one inference on `x`, or None when the call is not a plain one this struct was made for (or
// a parameter changed since it was prepared, or another thread runs the model): the caller then takes the Python
// path. An exception leaves the same way, never into ctypes.
extern "C" PyObject* sol_fast_forward(PyObject* x, const sol_fast_call* call) noexcept {
  try {
    // a plain torch.Tensor only: a subclass (a FakeTensor while torch.compile traces, a wrapper tensor) may have
    // no data of its own, and its __torch_function__ is the Python path's to honour
    if (*call->enabled == 0 || c10::GradMode::is_enabled() || at::autocast::is_autocast_enabled(at::kCPU) ||
        Py_TYPE(x) != reinterpret_cast<PyTypeObject*>(THPVariableClass) ||
        PyList_GET_SIZE(call->listeners) != 0 ||
        PyLong_AsLongLong(PyList_GET_ITEM(call->assignments, 0)) != call->assigned) {
      Py_RETURN_NONE;
    }
    const at::Tensor& input = THPVariable_Unpack(x);
    if (!input.device().is_cpu() || input.scalar_type() != at::kFloat || input.dim() != call->input_ndim ||
        input.is_neg() || input.is_conj() || !input.is_contiguous() || !input.has_storage()) {
      Py_RETURN_NONE;
    }
    for (int64_t d = 0; d < call->input_ndim; ++d) {
      if (input.size(d) != call->input_sizes[d]) Py_RETURN_NONE;
    }
    const Py_ssize_t count = PyList_GET_SIZE(call->tensors);
    for (Py_ssize_t i = 0; i < count; ++i) {
      const c10::TensorImpl* impl = THPVariable_Unpack(PyList_GET_ITEM(call->tensors, i)).unsafeGetTensorImpl();
      if (!impl->version_counter().enabled() || !impl->has_storage()) Py_RETURN_NONE;
      const char* base = static_cast<const char*>(impl->storage().data());
      if (static_cast<int64_t>(impl->version_counter().current_version()) != call->versions[i] || base == nullptr ||
          base + impl->storage_offset() * static_cast<int64_t>(impl->itemsize()) != call->pointers[i]) {
        Py_RETURN_NONE;
      }
    }
    PyObject* acquired = PyObject_CallMethod(call->lock, "acquire", "O", Py_False);
    if (acquired == nullptr) {
      PyErr_Clear();
      Py_RETURN_NONE;
    }
    const bool owned = acquired == Py_True;
    Py_DECREF(acquired);
    if (!owned) Py_RETURN_NONE;  // another thread runs this model: the Python path waits for it
    int status = -1;
    at::Tensor output;
    try {
      output = at::empty(c10::IntArrayRef(call->output_sizes, call->output_ndim), at::TensorOptions().dtype(at::kFloat));
      void* inputs[1] = {const_cast<void*>(input.const_data_ptr())};
      void* outputs[1] = {output.mutable_data_ptr()};
      Py_BEGIN_ALLOW_THREADS
      status = call->forward(call->derived, inputs, call->params, outputs, call->workspace, call->batch);
      Py_END_ALLOW_THREADS
    } catch (...) {
      status = -1;
    }
    PyObject* released = PyObject_CallMethod(call->lock, "release", nullptr);
    if (released == nullptr) return nullptr;  // the lock's own error, raised by ctypes
    Py_DECREF(released);
    if (status != 0) Py_RETURN_NONE;  // the Python path runs it again and explains the status
    return THPVariable_Wrap(std::move(output));
  } catch (...) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
}
