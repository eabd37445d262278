#include "util/host_memory.h"

#include <gtest/gtest.h>

#include <cstring>

#include "testing/sanitizer.h"

namespace reshard::internal {
namespace {

TEST(HostMemoryTest, SmallBuffersAre64ByteAlignedLargeOnes2MiB) {
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{4096},
                     uint64_t{2} << 20, (uint64_t{5} << 20) + 3}) {
    SCOPED_TRACE(n);
    HostBuffer b = AllocateHostBytes(n);
    ASSERT_NE(b, nullptr);
    const auto address = reinterpret_cast<uintptr_t>(b.get());
    EXPECT_EQ(address % (n >= (uint64_t{2} << 20) ? (2u << 20) : 64u), 0u);
    std::memset(b.get(), 0xAB, n == 0 ? 1 : n);  // every byte is ours
    EXPECT_EQ(b.get()[n == 0 ? 0 : n - 1], 0xAB);
  }
}

TEST(HostMemoryTest, AnImpossibleSizeIsNull) {
  // Rounding up would overflow: refused before any allocation.
  EXPECT_EQ(AllocateHostBytes(UINT64_MAX), nullptr);
  // Larger than any address space: the allocator's null (sanitizer
  // allocators abort on such a request instead, by design).
  if (!testing::kSanitized) {
    EXPECT_EQ(AllocateHostBytes(uint64_t{1} << 62), nullptr);
  }
}

}  // namespace
}  // namespace reshard::internal
