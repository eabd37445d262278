#include "util/byte_shares.h"

#include <gtest/gtest.h>

#include <mutex>
#include <utility>
#include <vector>

namespace reshard::internal {
namespace {

// Shares of about equal bytes, contiguous, covering every item once; the
// last share takes what the others left; no threads beyond the shares.
TEST(ByteSharesTest, ContiguousSharesOfAboutEqualBytesCoverEveryItemOnce) {
  const std::vector<uint64_t> sizes = {10, 10, 10, 10, 40, 10, 10};
  std::mutex mu;
  std::vector<std::pair<size_t, size_t>> shares;
  RunInByteShares(
      sizes.size(), 3, [&](size_t i) { return sizes[i]; },
      [&](size_t first, size_t last) {
        std::lock_guard<std::mutex> lock(mu);
        shares.emplace_back(first, last);
      });
  std::sort(shares.begin(), shares.end());
  // 100 bytes in thirds: [0, 4) reaches 40 >= 33, [4, 5) 80 >= 66, the
  // rest.
  EXPECT_EQ(shares,
            (std::vector<std::pair<size_t, size_t>>{{0, 4}, {4, 5}, {5, 7}}));
  shares.clear();
  RunInByteShares(
      sizes.size(), 1, [&](size_t i) { return sizes[i]; },
      [&](size_t first, size_t last) { shares.emplace_back(first, last); });
  EXPECT_EQ(shares, (std::vector<std::pair<size_t, size_t>>{{0, 7}}));
  shares.clear();
  RunInByteShares(
      0, 4, [&](size_t) { return uint64_t{0}; },
      [&](size_t first, size_t last) {
        std::lock_guard<std::mutex> lock(mu);
        if (first != last) shares.emplace_back(first, last);
      });
  EXPECT_TRUE(shares.empty());
}

}  // namespace
}  // namespace reshard::internal
