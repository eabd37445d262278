// Large host allocations for weights: aligned, with transparent huge pages
// when large, never touched here (the first write faults them in); and the
// same hint for large buffers allocated elsewhere.

#ifndef RESHARD_UTIL_HOST_MEMORY_H_
#define RESHARD_UTIL_HOST_MEMORY_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace reshard::internal {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<uint8_t, FreeDeleter>;

// `n` bytes (at least 1), 64-byte aligned, or 2 MiB-aligned with
// transparent huge pages from 2 MiB up (fewer page faults, and fewer pages
// to pin for zero-copy transports); uninitialized. Null when it fails.
HostBuffer AllocateHostBytes(uint64_t n);

// Asks for transparent huge pages on the whole 2 MiB pages inside
// [data, data + n) of an anonymous mapping (a large malloc'd buffer, say)
// before its first touch: one fault per 2 MiB instead of 512. A hint only:
// the bytes are unchanged, and a range holding no whole huge page, or a
// kernel that declines, leaves everything as it was.
void AdviseHugePages(void* data, uint64_t n);

// Reserves room for `n` elements in `v` and, when that allocated fresh
// memory, asks huge pages for it: for tables of millions of entries, filled
// once (a plan's fragments and regions).
template <typename T>
void ReserveWithHugePages(std::vector<T>* v, size_t n) {
  if (n <= v->capacity()) return;
  v->reserve(n);
  AdviseHugePages(v->data(), v->capacity() * sizeof(T));
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_HOST_MEMORY_H_
