// Transparent huge pages for the planner's and the decoder's large tables.
//
// A plan of a trillion-parameter model fills several tables of hundreds of
// megabytes once, front to back. With 4 KiB pages every first touch is a
// page fault (on virtual machines a costly one); measured on Kimi-K2, faults
// were a fifth of the plan's time. Advising the kernel that such a range may
// use 2 MiB pages makes it take one fault per 2 MiB instead of 512.

#ifndef RESHARD_UTIL_HUGE_PAGES_H_
#define RESHARD_UTIL_HUGE_PAGES_H_

#include <cstddef>
#include <vector>

namespace reshard::internal {

// Ranges shorter than this are left alone: the advice cannot cover a whole
// huge page of them often enough to pay for the system call.
inline constexpr size_t kHugePageAdviceBytes = size_t{8} << 20;

// Advises MADV_HUGEPAGE for the 2 MiB-aligned pages wholly inside
// [data, data + bytes). Only advice: content is unchanged, and a kernel
// without transparent huge pages ignores it. Returns the bytes advised.
size_t AdviseHugePages(const void* data, size_t bytes);

// Reserves `n` elements of `v` and advises huge pages for its storage.
template <typename T>
void ReserveHuge(std::vector<T>* v, size_t n) {
  v->reserve(n);
  AdviseHugePages(v->data(), v->capacity() * sizeof(T));
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_HUGE_PAGES_H_
