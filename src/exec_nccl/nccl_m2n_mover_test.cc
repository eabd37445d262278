// AwaitM2nGroup, the wait of the NCCL exchange's tensor mover for a
// posted ncclReshard group (the emulation's and the library's): done,
// timed out, aborted by poll_abort, and a group that finished while it
// was being withdrawn.

#include "exec_nccl/nccl_m2n_mover.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "testing/status_testing.h"

namespace reshard::nccl {
namespace {

using ::reshard::testing::StatusIs;
using Clock = std::chrono::steady_clock;

ExchangeRunOptions Within(std::chrono::milliseconds ms) {
  ExchangeRunOptions o;
  o.deadline = Clock::now() + ms;
  return o;
}

TEST(AwaitM2nGroupTest, ReturnsOnceTheGroupIsDone) {
  int polls = 0, withdrawn = 0;
  Status st = AwaitM2nGroup([&]() -> Result<bool> { return ++polls == 3; },
                            [&] { return ++withdrawn > 0; },
                            Within(std::chrono::seconds(10)), "late");
  EXPECT_OK(st);
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(withdrawn, 0);
}

TEST(AwaitM2nGroupTest, ThePollsErrorEndsTheWait) {
  Status st = AwaitM2nGroup(
      []() -> Result<bool> {
        return Status::Unavailable("ncclReshard failed");
      },
      [] { return true; }, Within(std::chrono::seconds(10)), "late");
  EXPECT_THAT(st, StatusIs(StatusCode::kUnavailable, "ncclReshard failed"));
}

TEST(AwaitM2nGroupTest, PastTheDeadlineTheGroupIsWithdrawn) {
  int withdrawn = 0;
  Status st = AwaitM2nGroup(
      []() -> Result<bool> { return false; }, [&] { return ++withdrawn == 1; },
      Within(std::chrono::milliseconds(5)), "timed out in ncclReshard");
  EXPECT_THAT(st,
              StatusIs(StatusCode::kUnavailable, "timed out in ncclReshard"));
  EXPECT_EQ(withdrawn, 1);
}

TEST(AwaitM2nGroupTest, AnAbortingPeerWithdrawsTheGroup) {
  ExchangeRunOptions o = Within(std::chrono::seconds(10));
  o.abort_poll_interval = std::chrono::milliseconds(0);
  o.poll_abort = [] { return Status::Aborted("rank 2 failed the update"); };
  int withdrawn = 0;
  Status st = AwaitM2nGroup([]() -> Result<bool> { return false; },
                            [&] { return ++withdrawn == 1; }, o, "late");
  EXPECT_THAT(st, StatusIs(StatusCode::kAborted, "rank 2 failed the update"));
  EXPECT_EQ(withdrawn, 1);
}

// The last rank joined before the withdrawal: the group is done, the wait
// goes on and succeeds.
TEST(AwaitM2nGroupTest, AGroupDoneBeforeItsWithdrawalSucceeds) {
  int polls = 0, withdrawals = 0;
  Status st = AwaitM2nGroup([&]() -> Result<bool> { return ++polls > 2; },
                            [&] {
                              ++withdrawals;
                              return false;
                            },
                            Within(std::chrono::milliseconds(0)), "late");
  EXPECT_OK(st);
  EXPECT_EQ(withdrawals, 2);
}

}  // namespace
}  // namespace reshard::nccl
