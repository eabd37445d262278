#include "util/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

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

bool PrefaultForWrite(void* begin, uint64_t bytes) {
#ifdef MADV_POPULATE_WRITE
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(begin);
  const uintptr_t from = (first + page - 1) & ~(page - 1);
  const uintptr_t to = (first + bytes) & ~(page - 1);
  if (bytes == 0 || to <= from) return false;
  return ::madvise(reinterpret_cast<void*>(from), to - from,
                   MADV_POPULATE_WRITE) == 0;
#else
  (void)begin;
  (void)bytes;
  return false;
#endif
}

}  // namespace reshard::internal
