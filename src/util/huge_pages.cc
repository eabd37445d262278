#include "util/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace reshard::internal {

size_t AdviseHugePages(const void* data, size_t bytes) {
  if (data == nullptr || bytes < kHugePageAdviceBytes) return 0;
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t last = (begin + bytes) & ~(kHuge - 1);
  if (last <= first) return 0;
  // Advice only: a refusal (no THP support) changes nothing but speed.
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) !=
      0) {
    return 0;
  }
  return last - first;
}

}  // namespace reshard::internal
