// The self-test's recovery faults: a byte flipped in update 2 fails that
// update on every rank and the session goes on (UCX shared memory push and
// pull, TCP, in-process); a target rank killed after update 2 is started
// again and rejoins the open session, and every update verifies every
// region (UCX shared memory push and pull, TCP, delta); a rank killed and
// not started again ends the session at once. Both faults are refused
// where they cannot run.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "live/live_records.h"
#include "reshard/live.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "selftest/selftest.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::ReadTestData;
using ::reshard::testing::StatusIs;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Exchange {
  std::string name;
  std::string transport;  // "ucx" or "inproc"
  LiveProtocol protocol = LiveProtocol::kAuto;
  bool tcp = false;  // UCX over TCP on loopback
};

const Exchange kShmPull{"shm pull", "ucx", LiveProtocol::kPull};
const Exchange kShmPush{"shm push", "ucx", LiveProtocol::kPush};
const Exchange kTcpPush{"tcp push", "ucx", LiveProtocol::kPush, true};
const Exchange kTcpPull{"tcp pull", "ucx", LiveProtocol::kPull, true};
const Exchange kInproc{"inproc", "inproc", LiveProtocol::kPush};

SelfTestOptions Options(const Exchange& e, uint32_t procs, SelfTestFault fault,
                        const std::string& rendezvous) {
  SelfTestOptions o;
  o.transport = e.transport;
  o.procs = procs;
  o.protocol = e.protocol;
  if (e.tcp) {
    o.exchange_options.Set("tls", "tcp");
    o.exchange_options.Set("net_devices", "lo");
  }
  o.updates = 4;
  o.fault = fault;
  o.rendezvous = rendezvous;
  o.session = "s";
  o.timeout = std::chrono::seconds(10);
  o.measure_memcpy = false;
  return o;
}

// 1,024 regions of one byte between 4 source and 8 target participants.
WeightPlacementManifest Source() {
  return Must(WeightPlacementFromJson(
      ReadTestData("scenarios/four_axis_uint8_source.json")));
}
WeightPlacementManifest Target() {
  return Must(WeightPlacementFromJson(
      ReadTestData("scenarios/four_axis_uint8_target.json")));
}

TEST(SelfTestRecoveryTest, CorruptMessageFailsUpdateTwoAndTheSessionGoesOn) {
  const auto source = Source();
  const auto target = Target();
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const uint64_t regions = plan.regions().size();
  const uint64_t bytes = plan.summary().bytes;
  ASSERT_EQ(regions, 1024u);
  for (const Exchange& e : {kShmPull, kShmPush, kTcpPush, kInproc}) {
    SCOPED_TRACE(e.name);
    testing::TempDir dir("reshard-selftest");
    const SelfTestOptions o =
        Options(e, 3, SelfTestFault::kCorruptMessage, dir.path());
    ASSERT_OK_AND_ASSIGN(SelfTestReport r, RunSelfTest(source, target, o));
    EXPECT_TRUE(r.verified);
    EXPECT_EQ(r.mismatch, "");
    EXPECT_EQ(r.failed_updates, std::vector<uint64_t>({2}));
    ASSERT_EQ(r.failures.size(), 1u);
    // Rank 0's message: the decision of rank 1, the first target rank,
    // which flipped the byte and names the region.
    EXPECT_THAT(r.failures[0],
                StartsWith("update 2: Aborted: live session s failed as "
                           "decided by rank 1: DataLoss: live session s, rank "
                           "1, update 2: region "));
    EXPECT_THAT(r.failures[0], HasSubstr(" (tensor layers."));
    EXPECT_THAT(r.failures[0], HasSubstr(", target participant p-d0-p1-e0-t"));
    EXPECT_THAT(r.failures[0],
                HasSubstr(") from rank 0 (source p-d0-p0-e0-t0 and 127 more): "
                          "the bytes received differ from what the source "
                          "sent (XXH3-64 "));
    EXPECT_THAT(r.failures[0],
                EndsWith("(the session stays open: retry the update or run "
                         "the next one)"));
    // Every update after it verified every region and every target byte.
    EXPECT_EQ(r.verified_regions,
              std::vector<uint64_t>({regions, 0, regions, regions}));
    EXPECT_EQ(r.wire_bytes, std::vector<uint64_t>({bytes, 0, bytes, bytes}));
    EXPECT_EQ(r.update_seconds.size(), 4u);
    EXPECT_EQ(r.update_seconds[1], 0.0);
    EXPECT_EQ(r.verify_seconds.size(), 4u);
    EXPECT_EQ(r.bytes, bytes);
    EXPECT_EQ(r.opens, 1u);
    EXPECT_EQ(r.rejoins, 0u);
    EXPECT_EQ(r.ranks_ready, 2u);
  }
}

TEST(SelfTestRecoveryTest, RestartedTargetRankRejoinsAndEveryUpdateVerifies) {
  const auto source = Source();
  const auto target = Target();
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const uint64_t regions = plan.regions().size();
  const uint64_t bytes = plan.summary().bytes;
  for (const Exchange& e : {kShmPull, kShmPush, kTcpPush, kTcpPull}) {
    SCOPED_TRACE(e.name);
    testing::TempDir dir("reshard-selftest");
    const SelfTestOptions o =
        Options(e, 3, SelfTestFault::kRestartRank, dir.path());
    ASSERT_OK_AND_ASSIGN(SelfTestReport r, RunSelfTest(source, target, o));
    EXPECT_TRUE(r.verified);
    EXPECT_EQ(r.mismatch, "");
    EXPECT_EQ(r.rejoins, 1u);
    EXPECT_EQ(r.opens, 1u);
    EXPECT_EQ(r.failed_updates, std::vector<uint64_t>());
    EXPECT_EQ(r.failures, std::vector<std::string>());
    // Updates 1-2 from the killed process's report, 3-4 from the new one.
    EXPECT_EQ(r.verified_regions, std::vector<uint64_t>(4, regions));
    EXPECT_EQ(r.wire_bytes, std::vector<uint64_t>(4, bytes));
    EXPECT_EQ(r.update_seconds.size(), 4u);
    EXPECT_EQ(r.bytes, bytes);
    EXPECT_EQ(r.ranks_ready, 2u);
    // The new process removed the records of the one it replaced (the
    // launcher's abort for it and the partial report included).
    auto store = Must(OpenRendezvous(dir.path()));
    EXPECT_EQ(
        Must(store->List("s/")),
        std::vector<std::string>({"s/report/0", "s/report/1", "s/report/2"}));
  }
}

TEST(SelfTestRecoveryTest, RestartedRankRejoinsADeltaSession) {
  const auto source = Source();
  const auto target = Target();
  const uint64_t regions =
      Must(LogicalTransferPlan::Make(source, target)).regions().size();
  testing::TempDir dir("reshard-selftest");
  SelfTestOptions o =
      Options(kShmPush, 2, SelfTestFault::kRestartRank, dir.path());
  o.delta = true;
  o.change_fraction = 0.1;
  ASSERT_OK_AND_ASSIGN(SelfTestReport r, RunSelfTest(source, target, o));
  EXPECT_TRUE(r.verified) << r.mismatch;
  EXPECT_EQ(r.rejoins, 1u);
  EXPECT_EQ(r.opens, 1u);
  EXPECT_EQ(r.verified_regions, std::vector<uint64_t>(4, regions));
  // The rejoined rank's first update (3) is full: no region as a change.
  ASSERT_EQ(r.delta_regions.size(), 4u);
  EXPECT_EQ(r.delta_regions[0], 0u);
  EXPECT_EQ(r.delta_regions[2], 0u);
}

// A rank that dies and is not started again: the launcher's abort for it
// is final, so the survivor fails at once instead of waiting the
// rejoin_timeout (30 s) for a process to take its place.
TEST(SelfTestRecoveryTest, ARankNotStartedAgainEndsTheSessionAtOnce) {
  const auto source = Source();
  const auto target = Target();
  testing::TempDir dir("reshard-selftest");
  SelfTestOptions o =
      Options(kShmPush, 2, SelfTestFault::kKillBetweenUpdates, dir.path());
  const auto t0 = std::chrono::steady_clock::now();
  auto report = RunSelfTest(source, target, o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_THAT(report, StatusIs(StatusCode::kAborted,
                               "live self-test failed: rank 0 died of signal "
                               "9 (Killed)"));
  EXPECT_LT(seconds, 10.0);
  auto store = Must(OpenRendezvous(dir.path()));
  ASSERT_OK_AND_ASSIGN(
      internal::AbortRecord abort,
      internal::DecodeAbort(Must(store->Get("s/abort/0")), "s/abort/0", 0));
  EXPECT_TRUE(abort.final);
  EXPECT_EQ(abort.reason, "rank 0 died of signal 9 (Killed)");
}

TEST(SelfTestRecoveryTest, RecoveryFaultsAreRefusedWhereTheyCannotRun) {
  const auto source = Source();
  const auto target = Target();
  SelfTestOptions o = Options(kInproc, 3, SelfTestFault::kRestartRank, "");
  EXPECT_THAT(RunSelfTest(source, target, o),
              StatusIs(StatusCode::kInvalidArgument,
                       "the inproc transport runs every rank as a thread of "
                       "one process: it cannot run a single --rank or kill a "
                       "rank (use ucx)"));
  for (SelfTestFault f :
       {SelfTestFault::kCorruptMessage, SelfTestFault::kRestartRank}) {
    const std::string name = f == SelfTestFault::kCorruptMessage
                                 ? "--inject-fault corrupt-message"
                                 : "--inject-fault restart-rank";
    o = Options(kShmPush, 3, f, "");
    o.updates = 2;
    EXPECT_THAT(RunSelfTest(source, target, o),
                StatusIs(StatusCode::kInvalidArgument,
                         name + " needs --updates 3 or more and --procs 2 or "
                                "more"));
    o.updates = 3;
    o.procs = 1;
    EXPECT_THAT(RunSelfTest(source, target, o),
                StatusIs(StatusCode::kInvalidArgument,
                         name + " needs --updates 3 or more and --procs 2 or "
                                "more"));
  }
  o = Options(kShmPush, 3, SelfTestFault::kRestartRank, "/nonexistent");
  o.rank = 1;
  EXPECT_THAT(RunSelfTest(source, target, o),
              StatusIs(StatusCode::kInvalidArgument,
                       "--inject-fault restart-rank needs the launcher, which "
                       "starts the killed rank again (not --rank)"));
}

}  // namespace
}  // namespace reshard
