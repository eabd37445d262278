// Status -> Python exception translation for the native module.
//
// Every error of the library surfaces in Python as an exception carrying
// the library's message unchanged. InvalidArgument (invalid manifests,
// plans, bindings, tensors) is reshard.InvalidArgumentError, a subclass of
// both reshard.Error and ValueError; every other code has its own
// subclass of reshard.Error (python/reshard/__init__.py lists them).
#ifndef RESHARD_PYTHON_ERRORS_H_
#define RESHARD_PYTHON_ERRORS_H_

#include <pybind11/pybind11.h>

#include <utility>

#include "reshard/status.h"

namespace reshard::python {

// Thrown by the helpers below; translated into the exception class of the
// status code once control is back in pybind11.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override {
    return status_.message().c_str();
  }

 private:
  Status status_;
};

// A failed live update whose operations may still be in flight: raised as
// reshard.UncertainOutcomeError (the buffers must not be freed or reused).
class UncertainError : public StatusError {
 public:
  using StatusError::StatusError;
};

// Creates reshard._reshard.Error and its subclasses and registers the
// translator. Called once from the module initializer.
void RegisterErrors(pybind11::module_& m);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).ValueOrDie();
}

}  // namespace reshard::python

#endif  // RESHARD_PYTHON_ERRORS_H_
