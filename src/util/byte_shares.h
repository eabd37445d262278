// Work over a list of items of known sizes split across threads: each
// thread takes a contiguous share of about equal bytes (scans and hashes
// bound by memory reads, where a share per core adds bandwidth).
#ifndef RESHARD_UTIL_BYTE_SHARES_H_
#define RESHARD_UTIL_BYTE_SHARES_H_

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace reshard::internal {

// Calls run(first, last) for contiguous shares [first, last) of items
// [0, n) that together cover each item once, on `threads` threads (at
// least 1; the calling thread runs the last share), share t ending where
// the bytes so far (bytes(i): item i's) reach t + 1 of `threads` parts of
// the total. Returns when every share is done.
template <typename Bytes, typename Run>
void RunInByteShares(size_t n, size_t threads, const Bytes& bytes,
                     const Run& run) {
  if (threads == 0) threads = 1;
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += bytes(i);
  std::vector<std::thread> workers;
  size_t next = 0;
  uint64_t done = 0;
  for (size_t t = 0; t < threads; ++t) {
    const uint64_t goal = total * (t + 1) / threads;
    const size_t first = next;
    while (next < n && (done < goal || t + 1 == threads)) {
      done += bytes(next);
      ++next;
    }
    if (t + 1 == threads) {
      run(first, next);
    } else {
      workers.emplace_back([&run, first, last = next] { run(first, last); });
    }
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_BYTE_SHARES_H_
