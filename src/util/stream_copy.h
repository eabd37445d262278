// Copies that bypass the cache (non-temporal stores) into final target
// buffers: a reshard or a load writes far more than the cache holds, and
// streaming stores avoid reading every target line before overwriting it
// (2-2.5x a memcpy of 1 KiB rows into memory not in the cache). Not for
// bytes the caller reads again soon: they are not left in the cache.

#ifndef RESHARD_UTIL_STREAM_COPY_H_
#define RESHARD_UTIL_STREAM_COPY_H_

#include <cstddef>

namespace reshard::internal {

// Copies `n` bytes with streaming stores where the CPU supports them (AVX2)
// and n is at least 256 (shorter copies would write partial lines), else
// with memcpy. The ranges must not overlap. Call StreamFence() before
// another thread may read the target (streaming stores are weakly
// ordered); the calling thread sees its own stores in program order.
void StreamCopy(void* dst, const void* src, size_t n);
void StreamFence();

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_STREAM_COPY_H_
