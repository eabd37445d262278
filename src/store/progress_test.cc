#include "store/progress.h"

#include <gtest/gtest.h>

#include <thread>
#include <utility>
#include <vector>

namespace reshard::internal {
namespace {

using Calls = std::vector<std::pair<uint64_t, uint64_t>>;

TEST(ProgressMeterTest, EmptyCallbackDoesNothing) {
  ProgressCallback none;
  ProgressMeter meter(none, 100);
  meter.Add(100);
  meter.Finish();
  EXPECT_EQ(meter.done(), 0u);  // not even counted
}

TEST(ProgressMeterTest, FirstAndLastCallsAndBoundedRate) {
  Calls calls;
  ProgressCallback cb = [&](uint64_t d, uint64_t t) {
    calls.push_back({d, t});
  };
  const uint64_t total = uint64_t{1} << 30;
  {
    ProgressMeter meter(cb, total);
    for (uint64_t i = 0; i < total / 4096; ++i) meter.Add(4096);
    meter.Finish();
  }
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.front(), std::make_pair(uint64_t{0}, total));
  EXPECT_EQ(calls.back(), std::make_pair(total, total));
  // One call per 1/256 of the total, plus a few for the clock, never one
  // per Add (262,144 of them).
  EXPECT_LE(calls.size(), 2 + ProgressMeter::kMinStepFraction + 50);
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_LT(calls[i - 1].first, calls[i].first);
  }
}

TEST(ProgressMeterTest, FinishRepeatsNothing) {
  Calls calls;
  ProgressCallback cb = [&](uint64_t d, uint64_t t) {
    calls.push_back({d, t});
  };
  ProgressMeter meter(cb, 10);
  meter.Add(10);  // one step or more: called
  meter.Finish();
  EXPECT_EQ(calls, (Calls{{0, 10}, {10, 10}}));
}

TEST(ProgressMeterTest, SlowProgressIsReportedByTime) {
  Calls calls;
  ProgressCallback cb = [&](uint64_t d, uint64_t t) {
    calls.push_back({d, t});
  };
  ProgressMeter meter(cb, uint64_t{1} << 40);
  meter.Add(1);
  std::this_thread::sleep_for(ProgressMeter::kMinInterval);
  meter.Add(1);
  EXPECT_EQ(calls, (Calls{{0, uint64_t{1} << 40}, {2, uint64_t{1} << 40}}));
}

TEST(ProgressMeterTest, SeveralThreadsCountEveryByte) {
  uint64_t last = 0;
  ProgressCallback cb = [&](uint64_t d, uint64_t) { last = d; };
  ProgressMeter meter(cb, 4 * 10000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) meter.Add(1);
    });
  }
  for (auto& t : threads) t.join();
  meter.Finish();
  EXPECT_EQ(last, 40000u);
}

}  // namespace
}  // namespace reshard::internal
