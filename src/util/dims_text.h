// "[a, b, c]": a shape or offset in error messages, the one spelling
// every layer uses.

#ifndef RESHARD_UTIL_DIMS_TEXT_H_
#define RESHARD_UTIL_DIMS_TEXT_H_

#include <string>

#include "reshard/dims.h"

namespace reshard::internal {

inline std::string DimsText(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(d[i]);
  }
  return s + "]";
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_DIMS_TEXT_H_
