#include "util/claimed_runs.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

TEST(ClaimedRunsTest, EveryRunOnceOnAtMostTheWorkersAsked) {
  for (const size_t n : {0, 1, 2, 3, 1000}) {
    for (const unsigned threads : {0u, 1u, 2u, 4u}) {
      SCOPED_TRACE(std::to_string(n) + " runs, " + std::to_string(threads) +
                   " threads");
      std::vector<std::atomic<int>> calls(n);
      std::vector<std::atomic<int>> by_worker(4);
      ForEachClaimed(n, threads, [&](size_t r, unsigned worker) {
        ++calls[r];
        ++by_worker[worker];
      });
      for (size_t r = 0; r < n; ++r) EXPECT_EQ(calls[r].load(), 1) << r;
      const size_t workers = std::min<size_t>(std::max(threads, 1u), n);
      int total = 0;
      for (unsigned w = 0; w < 4; ++w) {
        if (w >= workers) {
          EXPECT_EQ(by_worker[w].load(), 0) << w;
        }
        total += by_worker[w].load();
      }
      EXPECT_EQ(total, static_cast<int>(n));
    }
  }
}

TEST(ClaimedRunsTest, SlowWorkerTakesFewerRuns) {
  // Worker 0 (the caller) sleeps on its first run; the helper takes the
  // others meanwhile, so the total is far below a fixed half split.
  std::vector<unsigned> owner(40, 99);
  ForEachClaimed(owner.size(), 2, [&](size_t r, unsigned worker) {
    owner[r] = worker;
    if (worker == 0 && r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  size_t by_caller = 0;
  for (unsigned w : owner) {
    ASSERT_LT(w, 2u);
    by_caller += w == 0;
  }
  EXPECT_LT(by_caller, owner.size() / 2);
}

TEST(ClaimedRunsTest, WorkerStateNeedsNoLock) {
  // Calls of one worker are sequential: per-worker sums need no atomics.
  std::vector<uint64_t> sums(2, 0);
  ForEachClaimed(100000, 2,
                 [&](size_t r, unsigned worker) { sums[worker] += r; });
  EXPECT_EQ(sums[0] + sums[1], uint64_t{100000} * 99999 / 2);
}

TEST(ClaimedRunsTest, FirstErrorInRunOrderWhateverTheTiming) {
  for (const unsigned threads : {1u, 2u, 3u}) {
    for (const std::set<size_t>& failing :
         std::vector<std::set<size_t>>{{}, {0}, {31}, {5, 6}, {3, 17, 30}}) {
      SCOPED_TRACE(
          std::to_string(threads) + " threads, first failing " +
          (failing.empty() ? "none" : std::to_string(*failing.begin())));
      std::vector<std::atomic<int>> calls(32);
      const Status st =
          ForEachClaimedUntilError(32, threads, [&](size_t r, unsigned) {
            ++calls[r];
            // Later runs finish first, so a late error is seen early.
            std::this_thread::sleep_for(std::chrono::microseconds(32 - r));
            return failing.count(r)
                       ? Status::DataLoss("run " + std::to_string(r))
                       : Status::OK();
          });
      if (failing.empty()) {
        EXPECT_OK(st);
        continue;
      }
      const size_t first = *failing.begin();
      EXPECT_EQ(st, Status::DataLoss("run " + std::to_string(first)));
      // Every run before the first failure ran; none ran twice.
      for (size_t r = 0; r < 32; ++r) {
        EXPECT_LE(calls[r].load(), 1) << r;
        if (r <= first) {
          EXPECT_EQ(calls[r].load(), 1) << r;
        }
      }
      if (threads == 1) {  // one worker stops right at the failure
        for (size_t r = first + 1; r < 32; ++r) EXPECT_EQ(calls[r].load(), 0);
      }
    }
  }
}

}  // namespace
}  // namespace reshard::internal
