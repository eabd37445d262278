#include "util/host_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

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

TEST(HostMemoryTest, HugePageAdviceKeepsEveryByte) {
  // Unaligned, smaller than a huge page, empty, and at the end of the
  // address space: all accepted, nothing changed.
  std::string text(5u << 20, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7);
  const std::string before = text;
  AdviseHugePages(text.data() + 3, text.size() - 3);
  AdviseHugePages(text.data(), 100);
  AdviseHugePages(text.data(), 0);
  AdviseHugePages(reinterpret_cast<void*>(UINTPTR_MAX - 10), 1u << 30);
  EXPECT_EQ(text, before);
  // Advised before the first touch, as a reader does.
  std::string fresh;
  fresh.reserve(6u << 20);
  AdviseHugePages(fresh.data(), fresh.capacity());
  fresh.assign(before);
  EXPECT_EQ(fresh, before);
}

}  // namespace
}  // namespace reshard::internal
