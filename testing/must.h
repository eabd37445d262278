// Unwrapping of results that a test's setup requires to succeed. A failure
// surfaces as an exception that GoogleTest reports against the test, so
// setup code reads straight through without ASSERT plumbing.

#ifndef RESHARD_TESTING_MUST_H_
#define RESHARD_TESTING_MUST_H_

#include <stdexcept>
#include <utility>

#include "reshard/status.h"

namespace reshard::testing {

// The value of `r`; throws std::runtime_error with the status when it
// holds an error.
template <typename T>
T Must(Result<T> r) {
  if (!r.ok()) throw std::runtime_error(r.status().ToString());
  return std::move(r).ValueOrDie();
}

// Throws std::runtime_error with the status when `st` is an error.
inline void MustOk(const Status& st) {
  if (!st.ok()) throw std::runtime_error(st.ToString());
}

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_MUST_H_
