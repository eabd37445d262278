#include "src/python/progress.h"

#include <utility>

#include "src/python/errors.h"

namespace reshard::python {

namespace py = pybind11;

PyProgress::PyProgress(py::object fn) : fn_(std::move(fn)) {
  if (!fn_.is_none() && !PyCallable_Check(fn_.ptr())) {
    ThrowIfError(Status::InvalidArgument(
        "progress must be a callable (done, total) or None"));
  }
}

ProgressCallback PyProgress::Callback() {
  if (fn_.is_none()) return {};
  return [this](uint64_t done, uint64_t total) { Call(done, total); };
}

void PyProgress::Call(uint64_t done, uint64_t total) {
  py::gil_scoped_acquire gil;
  if (error_) return;
  try {
    fn_(done, total);
  } catch (...) {  // never through the library's frames
    error_ = std::current_exception();
  }
}

void PyProgress::Rethrow() {
  if (!error_) return;
  std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace reshard::python
