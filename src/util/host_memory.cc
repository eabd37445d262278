#include "util/host_memory.h"

#include <sys/mman.h>

#include <cstdint>

namespace reshard::internal {
namespace {

constexpr uint64_t kHuge = uint64_t{2} << 20;

}  // namespace

void AdviseHugePages(void* data, uint64_t n) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  if (n < kHuge || begin > UINTPTR_MAX - n) return;
  const uintptr_t first = (begin + kHuge - 1) & ~uintptr_t{kHuge - 1};
  const uintptr_t last = (begin + n) & ~uintptr_t{kHuge - 1};
  if (last > first) {
    ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
}

HostBuffer AllocateHostBytes(uint64_t n) {
  const uint64_t align = n >= kHuge ? kHuge : 64;
  if (n == 0) n = 1;
  if (n > UINT64_MAX - align) return nullptr;
  const uint64_t size = (n + align - 1) & ~(align - 1);
  HostBuffer buf(static_cast<uint8_t*>(std::aligned_alloc(
      static_cast<size_t>(align), static_cast<size_t>(size))));
  if (buf && align == kHuge) ::madvise(buf.get(), size, MADV_HUGEPAGE);
  return buf;
}

}  // namespace reshard::internal
