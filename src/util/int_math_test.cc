// CeilDiv: exact rounding up, also where a + b - 1 would overflow.

#include "util/int_math.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace reshard::internal {
namespace {

TEST(IntMathTest, CeilDivRoundsUpExactlyWithoutOverflow) {
  EXPECT_EQ(CeilDiv(0, 128), 0);
  EXPECT_EQ(CeilDiv(1, 128), 1);
  EXPECT_EQ(CeilDiv(128, 128), 1);
  EXPECT_EQ(CeilDiv(129, 128), 2);
  EXPECT_EQ(CeilDiv(7, 1), 7);
  EXPECT_EQ(CeilDiv(INT64_MAX, 1), INT64_MAX);
  EXPECT_EQ(CeilDiv(INT64_MAX, 2), INT64_MAX / 2 + 1);
  EXPECT_EQ(CeilDiv(INT64_MAX, INT64_MAX), 1);
  EXPECT_EQ(CeilDiv(INT64_MAX - 1, INT64_MAX), 1);
}

}  // namespace
}  // namespace reshard::internal
