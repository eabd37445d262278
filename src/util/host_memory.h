// Large host allocations for weights: aligned, with transparent huge pages
// when large, never touched here (the first write faults them in).

#ifndef RESHARD_UTIL_HOST_MEMORY_H_
#define RESHARD_UTIL_HOST_MEMORY_H_

#include <cstdint>
#include <cstdlib>
#include <memory>

namespace reshard::internal {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<uint8_t, FreeDeleter>;

// `n` bytes (at least 1), 64-byte aligned, or 2 MiB-aligned with
// transparent huge pages from 2 MiB up (fewer page faults, and fewer pages
// to pin for zero-copy transports); uninitialized. Null when it fails.
HostBuffer AllocateHostBytes(uint64_t n);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_HOST_MEMORY_H_
