// Copies that bypass the cache (non-temporal stores) for large transfers:
// a reshard writes far more than the cache holds, and streaming stores
// avoid reading every target line before overwriting it.

#ifndef RESHARD_EXEC_LOCAL_STREAM_COPY_H_
#define RESHARD_EXEC_LOCAL_STREAM_COPY_H_

#include <cstddef>

namespace reshard::internal {

// Copies `n` bytes with streaming stores where the CPU supports them (AVX2),
// else with memcpy. Call StreamFence() before another thread may read the
// target.
void StreamCopy(void* dst, const void* src, size_t n);
void StreamFence();

}  // namespace reshard::internal

#endif  // RESHARD_EXEC_LOCAL_STREAM_COPY_H_
