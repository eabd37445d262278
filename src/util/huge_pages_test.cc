#include "util/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <vector>

namespace reshard::internal {
namespace {

TEST(HugePagesTest, SmallRangesAreLeftAlone) {
  std::vector<char> small(kHugePageAdviceBytes - 1);
  EXPECT_EQ(AdviseHugePages(small.data(), small.size()), 0u);
  EXPECT_EQ(AdviseHugePages(nullptr, size_t{64} << 20), 0u);
}

TEST(HugePagesTest, AdvisesOnlyWholeAlignedHugePagesAndKeepsContent) {
  constexpr size_t kHuge = size_t{2} << 20;
  std::vector<uint64_t> v;
  ReserveHuge(&v, (size_t{16} << 20) / sizeof(uint64_t));
  ASSERT_GE(v.capacity() * sizeof(uint64_t), size_t{16} << 20);
  const size_t advised = AdviseHugePages(v.data(), v.capacity() * 8);
  EXPECT_EQ(advised % kHuge, 0u);
  EXPECT_LE(advised, v.capacity() * 8);
  // Whole 2 MiB pages inside the range, at least 16 MiB - 2 * 2 MiB of it,
  // where the kernel has transparent huge pages at all.
  if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    EXPECT_GE(advised, (size_t{16} << 20) - 2 * kHuge);
  }
  for (uint64_t i = 0; i < v.capacity(); ++i) v.push_back(i * 2654435761u);
  for (uint64_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], i * 2654435761u);
}

}  // namespace
}  // namespace reshard::internal
