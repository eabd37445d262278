// Work split into numbered runs that a few threads claim in turn.
//
// A fixed split (half the runs to each thread) finishes when the slower
// half does: a thread slowed by page faults, a busy core or a slow read
// holds everyone up. Here each thread takes the next unclaimed run when it
// finishes one, so a slowed thread simply takes fewer.

#ifndef RESHARD_UTIL_CLAIMED_RUNS_H_
#define RESHARD_UTIL_CLAIMED_RUNS_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "reshard/status.h"

namespace reshard::internal {

// Calls work(run, worker) once for every run in [0, n) and returns when
// all have returned. min(threads, n) workers take part (at least one): the
// calling thread is worker 0, the others are threads started here and
// joined before the return, so what a worker wrote is visible to the
// caller afterwards. Runs are claimed in increasing order; calls for
// distinct runs may be concurrent, calls of one worker are sequential (a
// worker may keep scratch state indexed by `worker`).
template <typename Work>
void ForEachClaimed(size_t n, unsigned threads, Work&& work) {
  std::atomic<size_t> next{0};
  auto run = [&](unsigned worker) {
    for (size_t r = next++; r < n; r = next++) work(r, worker);
  };
  const size_t workers = std::min<size_t>(std::max(threads, 1u), n);
  std::vector<std::thread> helpers;
  for (unsigned w = 1; w < workers; ++w) helpers.emplace_back(run, w);
  run(0);
  for (std::thread& t : helpers) t.join();
}

// ForEachClaimed for work that can fail: runs after the lowest failed one
// are skipped (runs before it still run), and the result is that run's
// error, the first in run order whatever the threads' timing; OK if every
// run succeeded.
template <typename Work>
Status ForEachClaimedUntilError(size_t n, unsigned threads, Work&& work) {
  std::vector<Status> status(n);
  std::atomic<size_t> first_failed{n};
  ForEachClaimed(n, threads, [&](size_t r, unsigned worker) {
    if (r > first_failed.load()) return;
    status[r] = work(r, worker);
    if (status[r].ok()) return;
    size_t seen = first_failed.load();
    while (r < seen && !first_failed.compare_exchange_weak(seen, r)) {
    }
  });
  const size_t failed = first_failed.load();
  return failed < n ? status[failed] : Status::OK();
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_CLAIMED_RUNS_H_
