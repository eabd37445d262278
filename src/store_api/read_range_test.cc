// RangeContinues: the one rule by which backends merge ranges into runs
// and loads count them.

#include <gtest/gtest.h>

#include <cstdint>

#include "reshard/sdk/object_store.h"

namespace reshard {
namespace {

TEST(RangeContinuesTest, SameObjectStartingWhereThePreviousEnds) {
  char a[8], b[8];
  const ReadRange first{"obj", 100, 8, a};
  EXPECT_TRUE(RangeContinues(first, {"obj", 108, 8, b}));
  EXPECT_TRUE(RangeContinues(first, {"obj", 108, 0, b}));
  EXPECT_TRUE(RangeContinues({"obj", 100, 0, a}, {"obj", 100, 3, b}));
  EXPECT_FALSE(RangeContinues(first, {"obj", 109, 8, b}));  // a gap
  EXPECT_FALSE(RangeContinues(first, {"obj", 107, 8, b}));  // overlap
  EXPECT_FALSE(RangeContinues(first, {"obj", 100, 8, b}));  // the same bytes
  EXPECT_FALSE(RangeContinues(first, {"obj2", 108, 8, b}));
  EXPECT_FALSE(RangeContinues(first, {"ob", 108, 8, b}));
}

TEST(RangeContinuesTest, OverflowingRangesContinueNothing) {
  char a[1];
  const ReadRange wraps{"obj", UINT64_MAX - 1, 4, a};  // ends at 2, wrapped
  EXPECT_FALSE(RangeContinues(wraps, {"obj", 2, 1, a}));
  EXPECT_FALSE(RangeContinues({"obj", 0, 10, a}, {"obj", 10, UINT64_MAX, a}));
  EXPECT_TRUE(
      RangeContinues({"obj", 0, 10, a}, {"obj", 10, UINT64_MAX - 10, a}));
}

}  // namespace
}  // namespace reshard
