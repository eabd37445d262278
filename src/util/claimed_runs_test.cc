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
  // Whichever worker claims run 0 stalls there until the other has taken
  // every other run (or 10 s pass), so it takes that one run only; a
  // fixed half split would have given it 20.
  constexpr size_t kRuns = 40;
  std::vector<unsigned> owner(kRuns, 99);
  std::atomic<size_t> others{0};
  ForEachClaimed(kRuns, 2, [&](size_t r, unsigned worker) {
    owner[r] = worker;
    if (r != 0) {
      ++others;
      return;
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (others.load() < kRuns - 1 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const unsigned slow = owner[0];
  ASSERT_LT(slow, 2u);
  size_t by_slow = 0;
  for (unsigned w : owner) {
    ASSERT_LT(w, 2u);
    by_slow += w == slow;
  }
  EXPECT_EQ(by_slow, 1u);
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
