#include "util/host_memory.h"

#include <sys/mman.h>

namespace reshard::internal {

HostBuffer AllocateHostBytes(uint64_t n) {
  constexpr uint64_t kHuge = uint64_t{2} << 20;
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
