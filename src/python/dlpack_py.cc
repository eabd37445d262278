// DLPack intake: the address, size, element type and device of an object
// exporting `__dlpack__`, read from its capsule (dlpack/dlpack.h, Debian's
// libdlpack-dev) without consuming it. The capsule is returned as the
// keep-alive: it keeps the producer's memory alive, and its destructor
// releases the tensor (the capsule is never renamed "used_dltensor", so
// the producer still owns the deleter call).
#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <string>

#include "src/python/convert.h"
#include "src/python/errors.h"
#include "src/python/module.h"

namespace reshard::python {
namespace {

namespace py = pybind11;

std::string DtypeName(const DLDataType& t) {
  if (t.lanes != 1) return "";
  const std::string bits = std::to_string(t.bits);
  switch (t.code) {
    case kDLInt:
      return "int" + bits;
    case kDLUInt:
      return t.bits == 8 ? "uint8" : "uint" + bits;
    case kDLFloat:
      return "float" + bits;
    case kDLBfloat:
      return t.bits == 16 ? "bfloat16" : "";
    default:
      return "";
  }
}

// Row-major contiguous: no strides (DLPack's convention), or strides equal
// to the canonical ones on every dimension of extent > 1.
bool IsContiguous(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

py::dict DlpackView(py::object obj, std::string_view what) {
  py::object capsule = obj.attr("__dlpack__")();
  void* raw = PyCapsule_GetPointer(capsule.ptr(), "dltensor");
  if (raw == nullptr) {
    PyErr_Clear();
    ThrowInvalid(what, "exports no DLPack tensor (capsule not 'dltensor')");
  }
  const DLTensor& t = static_cast<DLManagedTensor*>(raw)->dl_tensor;
  if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr)) {
    ThrowInvalid(what, "exports a malformed DLPack tensor");
  }
  uint64_t elements = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0) ThrowInvalid(what, "has a negative DLPack extent");
    elements *= static_cast<uint64_t>(t.shape[d]);
  }
  const uint64_t itemsize = (uint64_t{t.dtype.bits} * t.dtype.lanes + 7) / 8;
  py::dict d;
  d["address"] = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  d["nbytes"] = elements * itemsize;
  d["itemsize"] = itemsize;
  d["dtype"] = DtypeName(t.dtype);
  d["device_type"] = static_cast<int>(t.device.device_type);
  d["device_id"] = t.device.device_id;
  // The binding's device: "cpu", "cuda:<ordinal>" (kDLCUDA), else "".
  d["device"] = t.device.device_type == kDLCPU ? std::string("cpu")
                : t.device.device_type == kDLCUDA
                    ? "cuda:" + std::to_string(t.device.device_id)
                    : std::string();
  d["contiguous"] = IsContiguous(t);
  d["keepalive"] = capsule;
  return d;
}

}  // namespace

void RegisterDlpack(py::module_& m) {
  m.def(
      "dlpack_view",
      [](py::object obj, py::object what) {
        return DlpackView(obj, ToStr(what, "what"));
      },
      py::arg("obj"), py::arg("what"),
      "address, nbytes, itemsize, dtype, device_type, device_id, device "
      "(\"cpu\", \"cuda:<ordinal>\" or \"\"), contiguous and keepalive (the "
      "capsule) of obj.__dlpack__().");
}

}  // namespace reshard::python
