// An optional Python `progress(done, total)` callable as the library's
// ProgressCallback (weight_store.h) of an operation run with the GIL
// released.

#ifndef RESHARD_SRC_PYTHON_PROGRESS_H_
#define RESHARD_SRC_PYTHON_PROGRESS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <exception>

#include "reshard/weight_store.h"

namespace reshard::python {

// Made and destroyed with the GIL held, around an operation that releases
// it. Callback() (empty for None) calls the callable on the operation's
// own thread with the GIL taken back for the call; the first exception it
// raises stops further calls and is raised by Rethrow() once the operation
// has returned (the operation itself runs to its end).
class PyProgress {
 public:
  explicit PyProgress(pybind11::object fn);
  PyProgress(const PyProgress&) = delete;
  PyProgress& operator=(const PyProgress&) = delete;

  ProgressCallback Callback();
  // With the GIL held: raises the callable's first exception, if any.
  void Rethrow();

 private:
  void Call(uint64_t done, uint64_t total);

  pybind11::object fn_;
  std::exception_ptr error_;  // the callable's first exception
};

}  // namespace reshard::python

#endif  // RESHARD_SRC_PYTHON_PROGRESS_H_
