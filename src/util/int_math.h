// Integer arithmetic shared by the layers that size tensors and blocks.

#ifndef RESHARD_UTIL_INT_MATH_H_
#define RESHARD_UTIL_INT_MATH_H_

#include <cstdint>

namespace reshard::internal {

// ceil(a / b) for a >= 0 and b >= 1, without the overflow of a + b - 1
// (a dimension near INT64_MAX from an untrusted config stays exact).
inline int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_INT_MATH_H_
