#include "util/host_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

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

// The pages wholly inside the range are mapped (resident, zero), the
// partial pages at its ends are left alone; an empty range does nothing.
TEST(HostMemoryTest, PrefaultMapsTheWholePagesInsideTheRange) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  constexpr size_t kPages = 16;
  void* raw = ::mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(raw);
  auto resident = [&] {
    std::vector<unsigned char> v(kPages);
    EXPECT_EQ(::mincore(raw, kPages * page, v.data()), 0);
    std::vector<bool> out;
    for (unsigned char c : v) out.push_back(c & 1);
    return out;
  };
  EXPECT_EQ(resident(), std::vector<bool>(kPages, false));
  EXPECT_FALSE(PrefaultForWrite(base + 1, 0));
  EXPECT_FALSE(PrefaultForWrite(base + 1, page - 2));  // no whole page
  EXPECT_EQ(resident(), std::vector<bool>(kPages, false));
  // Pages 1 to 13 whole, 0 and 14 partly, 15 not at all.
  EXPECT_TRUE(PrefaultForWrite(base + page - 1, 13 * page + 2));
  std::vector<bool> expected(kPages, true);
  expected[0] = expected[14] = expected[15] = false;
  EXPECT_EQ(resident(), expected);
  for (size_t i = page; i < 14 * page; ++i) ASSERT_EQ(base[i], 0) << i;
  ::munmap(raw, kPages * page);
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
