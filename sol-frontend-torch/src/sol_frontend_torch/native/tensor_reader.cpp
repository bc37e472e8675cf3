// Reads the version counter and data address of a list of PyTorch tensors in one C call.
//
// A compiled model checks all its parameters on every call (has one been
// written in place, or replaced?). In Python that is two attribute reads per
// tensor, 0.3 us each right after a model run has left the interpreter's data
// out of the caches: 80-160 us a call for MobileNetV2's 262 tensors, 4-8% of
// its run. This loop does the same in under 10 us.
//
// Built by native_reader.py against the installed torch's headers and checked
// against Python's own _version and data_ptr() before it is used.
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>  // THPVariable_Unpack (7 s of the 7.5 s build: pybind11)

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
