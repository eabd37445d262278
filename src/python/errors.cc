#include "src/python/errors.h"

#include <Python.h>

#include <array>
#include <string>

namespace reshard::python {
namespace {

namespace py = pybind11;

// One Python class per status code, indexed by the code's value.
constexpr int kCodes = static_cast<int>(StatusCode::kIOError) + 1;
std::array<PyObject*, kCodes> g_classes{};

struct ErrorClass {
  StatusCode code;
  const char* name;
  PyObject* extra_base;  // a builtin the class also derives from, or null
};

}  // namespace

void RegisterErrors(py::module_& m) {
  static py::handle base = PyErr_NewExceptionWithDoc(
      "reshard._reshard.Error",
      "Base class of every error the reshard library reports.", PyExc_Exception,
      nullptr);
  m.attr("Error") = base;
  const ErrorClass classes[] = {
      {StatusCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {StatusCode::kNotFound, "NotFoundError", PyExc_LookupError},
      {StatusCode::kAlreadyExists, "AlreadyExistsError", nullptr},
      {StatusCode::kFailedPrecondition, "FailedPreconditionError", nullptr},
      {StatusCode::kOutOfRange, "OutOfRangeError", PyExc_ValueError},
      {StatusCode::kResourceExhausted, "ResourceExhaustedError", nullptr},
      {StatusCode::kAborted, "AbortedError", nullptr},
      {StatusCode::kUnavailable, "UnavailableError", nullptr},
      {StatusCode::kDataLoss, "DataLossError", nullptr},
      {StatusCode::kUnimplemented, "UnimplementedError",
       PyExc_NotImplementedError},
      {StatusCode::kInternal, "InternalError", nullptr},
      {StatusCode::kIOError, "StoreIOError", PyExc_OSError},
  };
  for (const ErrorClass& c : classes) {
    py::tuple bases = c.extra_base != nullptr
                          ? py::make_tuple(base, py::handle(c.extra_base))
                          : py::make_tuple(base);
    const std::string qualified = std::string("reshard._reshard.") + c.name;
    PyObject* cls = PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    g_classes[static_cast<int>(c.code)] = cls;
    m.attr(c.name) = py::handle(cls);
  }
  g_classes[0] = base.ptr();
  static PyObject* uncertain = PyErr_NewExceptionWithDoc(
      "reshard._reshard.UncertainOutcomeError",
      "A live update failed while operations were in flight: UCX may still "
      "read this process's sources or write its targets; do not free or "
      "reuse them.",
      base.ptr(), nullptr);
  m.attr("UncertainOutcomeError") = py::handle(uncertain);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UncertainError& e) {
      PyErr_SetString(uncertain, e.status().message().c_str());
    } catch (const StatusError& e) {
      const int code = static_cast<int>(e.status().code());
      PyObject* cls = code > 0 && code < kCodes && g_classes[code] != nullptr
                          ? g_classes[code]
                          : g_classes[0];
      PyErr_SetString(cls, e.status().message().c_str());
    }
  });
}

}  // namespace reshard::python
