// Live reshard between real processes over UCX (shared memory and TCP on
// loopback): every golden scenario that fits, generated four-axis layouts
// and a dim0 -> dim2 case verify byte for byte with one message per region;
// killed ranks, stale generations and missing peers end with clear errors
// on every survivor, no target ready and no wait past the timeout.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "live/live_records.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/backends/fs_store.h"
#include "reshard/backends/ucx_options.h"
#include "reshard/binding.h"
#include "reshard/gen.h"
#include "reshard/live.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/sdk/peer_exchange.h"
#include "reshard/sdk/record_store.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "selftest/selftest.h"
#include "testing/children.h"
#include "testing/live_seats.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/sanitizer.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using ::reshard::testing::InChild;
using ::reshard::testing::InChildren;
using ::reshard::testing::Must;
using ::reshard::testing::ReadTestData;
using ::reshard::testing::StatusIs;
using ::reshard::testing::WithBindingChanges;
using ::testing::HasSubstr;

struct NamedUcx {
  std::string name;
  UcxOptions ucx;
  LiveProtocol protocol = LiveProtocol::kAuto;
  std::string exchange = "ucx";  // LiveSessionOptions::exchange
};

// Shared memory (UCX's default choice on one host: posix/sysv + cma) and
// TCP pinned to loopback, each pushed and pulled (auto is pull on shared
// memory, push on TCP).
std::vector<NamedUcx> Transports() {
  const UcxOptions tcp{.tls = "tcp", .net_devices = "lo"};
  return {{"shm pull", {}, LiveProtocol::kAuto},
          {"shm push", {}, LiveProtocol::kPush},
          {"tcp push", tcp, LiveProtocol::kAuto},
          {"tcp pull", tcp, LiveProtocol::kPull}};
}

// Transports() and the in-process exchange (every rank a thread of this
// process), pushed and pulled: the session's protocol without UCX.
std::vector<NamedUcx> Exchanges() {
  std::vector<NamedUcx> all = Transports();
  all.push_back({"inproc push", {}, LiveProtocol::kPush, "inproc"});
  all.push_back({"inproc pull", {}, LiveProtocol::kAuto, "inproc"});
  return all;
}

SelfTestOptions Ucx(const UcxOptions& ucx, uint32_t procs,
                    LiveProtocol protocol = LiveProtocol::kAuto) {
  SelfTestOptions o;
  o.transport = "ucx";
  o.procs = procs;
  o.exchange_options = ToPeerExchangeOptions(ucx);
  o.protocol = protocol;
  o.timeout = std::chrono::seconds(30);
  o.measure_memcpy = false;
  return o;
}

// A self-test over `t` (its protocol unless `protocol` is given).
SelfTestOptions Over(const NamedUcx& t, uint32_t procs,
                     std::optional<LiveProtocol> protocol = std::nullopt) {
  SelfTestOptions o = Ucx(t.ucx, procs, protocol.value_or(t.protocol));
  o.transport = t.exchange == "inproc" ? "inproc" : "ucx";
  return o;
}

uint32_t ParticipantsWithFragments(const WeightPlacementManifest& m) {
  uint32_t parts = 0;
  for (const auto& p : m.parts()) parts += !p.fragments().empty();
  return parts;
}

// Target ranks that hold fragments when targets fill ranks [procs/2, procs).
uint32_t TargetRanksWithFragments(const WeightPlacementManifest& target,
                                  uint32_t procs) {
  uint32_t parts = 0;
  for (const auto& p : target.parts()) parts += !p.fragments().empty();
  const uint32_t target_ranks = procs - procs / 2;
  return std::min(parts, target_ranks);
}

void ExpectLiveVerified(const SelfTestReport& r,
                        const WeightPlacementManifest& source,
                        const WeightPlacementManifest& target, uint32_t procs) {
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  EXPECT_TRUE(r.verified) << r.mismatch;
  EXPECT_EQ(r.mismatch, "");
  EXPECT_EQ(r.bytes, plan.summary().bytes);
  // Each region executed once, by its target's rank, in at most one
  // message (small regions between two ranks share messages).
  EXPECT_EQ(r.operations, plan.regions().size());
  EXPECT_LE(r.messages, plan.regions().size());
  EXPECT_GE(r.messages, 1u);
  EXPECT_EQ(r.segments, plan.summary().segments);
  EXPECT_EQ(r.ranks_ready, TargetRanksWithFragments(target, procs));
}

constexpr uint64_t kMaxScenarioBytes = uint64_t{16} << 20;

TEST(LiveSessionTest, GoldenScenariosVerifyOverShmAndTcp) {
  size_t ran = 0;
  for (const testing::ScenarioPair& pair :
       testing::ScenarioPairs(kMaxScenarioBytes)) {
    const auto& [key, source, target, bytes, regions] = pair;
    for (const NamedUcx& t : Exchanges()) {
      // Alternate 2, 3 and 4 processes over the scenarios, never more
      // than the participants with fragments (the self-test refuses more).
      const uint32_t procs = std::min(2 + static_cast<uint32_t>(ran % 3),
                                      ParticipantsWithFragments(source) +
                                          ParticipantsWithFragments(target));
      SCOPED_TRACE(std::string(key) + " over " + t.name + ", " +
                   std::to_string(procs) + " processes");
      ASSERT_OK_AND_ASSIGN(auto report,
                           RunSelfTest(source, target, Over(t, procs)));
      ExpectLiveVerified(report, source, target, procs);
      ++ran;
    }
  }
  // Every golden scenario that fits (TP, EP, PP, DP, cross-dim,
  // four-axis, aliases, fp8) ran on both transports, pushed and pulled.
  EXPECT_GE(ran, 4u * 18);
}

TEST(LiveSessionTest, FourAxisGeneratedLayouts) {
  const ModelSpec model = Must(
      ModelSpecFromJson(ReadTestData("../../examples/models/tiny-moe.json")));
  const auto source = Must(
      GenerateLayout(model, {.sizes = {.tp = 4, .pp = 2, .ep = 8, .dp = 2}}));
  const auto target = Must(
      GenerateLayout(model, {.sizes = {.tp = 8, .pp = 4, .ep = 2, .dp = 4}}));
  for (const NamedUcx& t : Exchanges()) {
    SCOPED_TRACE(t.name);
    ASSERT_OK_AND_ASSIGN(auto report, RunSelfTest(source, target, Over(t, 4)));
    ExpectLiveVerified(report, source, target, 4);
    EXPECT_GT(report.packed_messages, 0u);
  }
}

// Pushed messages between one source rank and one target rank: regions
// above kMaxCoalescedRegion alone, the others greedily batched in plan
// order up to kMaxCoalescedBytes (an independent statement of the rule).
uint64_t ExpectedPushedMessages(const LogicalTransferPlan& plan) {
  uint64_t messages = 0, open = 0;
  bool have_open = false;
  for (const TransferRegion& r : plan.regions()) {
    if (r.bytes > kMaxCoalescedRegion) {
      ++messages;
    } else if (have_open && open + r.bytes <= kMaxCoalescedBytes) {
      open += r.bytes;
    } else {
      ++messages;
      have_open = true;
      open = r.bytes;
    }
  }
  return messages;
}

// A layout of many small tensors (the tiny MoE, four axes each side) costs
// a few messages between two processes, not one per region, and every
// target byte is still checked.
TEST(LiveSessionTest, SmallRegionsAreCoalescedIntoFewMessages) {
  const ModelSpec model = Must(
      ModelSpecFromJson(ReadTestData("../../examples/models/tiny-moe.json")));
  const auto source = Must(
      GenerateLayout(model, {.sizes = {.tp = 4, .pp = 2, .ep = 8, .dp = 2}}));
  const auto target = Must(
      GenerateLayout(model, {.sizes = {.tp = 8, .pp = 4, .ep = 2, .dp = 4}}));
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const uint64_t expected = ExpectedPushedMessages(plan);
  ASSERT_LT(expected * 20, plan.regions().size());
  for (const NamedUcx& t : Exchanges()) {
    SCOPED_TRACE(t.name);
    ASSERT_OK_AND_ASSIGN(
        auto report,
        RunSelfTest(source, target, Over(t, 2, LiveProtocol::kPush)));
    ExpectLiveVerified(report, source, target, 2);
    EXPECT_EQ(report.messages, expected);
  }
  // Packed messages cross shared memory in fragments of the segment size:
  // UCX's own (0 keeps it) and the largest UCX 1.13 takes.
  for (uint32_t segment : {0u, 65535u}) {
    SCOPED_TRACE("shared-memory segment " + std::to_string(segment));
    UcxOptions ucx;
    ucx.shm_segment_bytes = segment;
    ASSERT_OK_AND_ASSIGN(auto report, RunSelfTest(source, target, Ucx(ucx, 2)));
    ExpectLiveVerified(report, source, target, 2);
  }
}

WeightPlacementManifest Cube(int64_t tp, int64_t dim) {
  return testing::CubeLayout(tp, dim, {8, 64, 1024});
}

// The [128, 4096, 16384] dim0 -> dim2 shape, scaled down: every region is
// one message although each has hundreds of 1 KiB rows.
TEST(LiveSessionTest, Dim0ToDim2IsOneMessagePerRegion) {
  const auto source = testing::CubeLayout(4, 0, {8, 64, 4096});
  const auto target = testing::CubeLayout(4, 2, {8, 64, 4096});
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  ASSERT_EQ(plan.regions().size(), 16u);
  ASSERT_EQ(plan.summary().segments, 8u * 64 * 4);
  ASSERT_GT(plan.regions()[0].bytes, kMaxCoalescedRegion);
  for (const NamedUcx& t : Exchanges()) {
    SCOPED_TRACE(t.name);
    ASSERT_OK_AND_ASSIGN(auto report, RunSelfTest(source, target, Over(t, 2)));
    ExpectLiveVerified(report, source, target, 2);
    EXPECT_EQ(report.messages, plan.regions().size());
    // Sources are strided (1 KiB rows of 4 KiB pitch) and packed by the
    // sender; each overlap is one contiguous block of its target.
    EXPECT_EQ(report.packed_messages, plan.regions().size());
  }
}

// The same shape with regions below kMaxCoalescedRegion: they travel
// together, one packed message for all of them, unpacked into each
// region's target block.
TEST(LiveSessionTest, SmallStridedRegionsShareOneMessage) {
  const auto source = Cube(4, 0);
  const auto target = Cube(4, 2);
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  ASSERT_EQ(plan.regions().size(), 16u);
  ASSERT_EQ(ExpectedPushedMessages(plan), 1u);
  for (const NamedUcx& t : Exchanges()) {
    SCOPED_TRACE(t.name);
    ASSERT_OK_AND_ASSIGN(auto report, RunSelfTest(source, target, Over(t, 2)));
    ExpectLiveVerified(report, source, target, 2);
    EXPECT_EQ(report.messages, 1u);
    EXPECT_EQ(report.packed_messages, 2u);  // packed once, unpacked once
  }
}

// Pull reads a strided region whose rows are at least kMinPulledRow (256
// KiB) with one get per row, at the row walker's offsets on both sides.
TEST(LiveSessionTest, PullReadsLongStridedRowsOneGetPerRow) {
  const Dims shape{8, 2, 1 << 20};
  const auto source = testing::CubeLayout(4, 0, shape);
  const auto target = testing::CubeLayout(4, 2, shape);
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  ASSERT_EQ(plan.regions().size(), 16u);
  ASSERT_EQ(plan.summary().segments, 16u * 4);
  for (const NamedUcx& t : Exchanges()) {
    if (t.name.find("pull") == std::string::npos) continue;
    SCOPED_TRACE(t.name);
    ASSERT_OK_AND_ASSIGN(
        auto report,
        RunSelfTest(source, target, Over(t, 2, LiveProtocol::kPull)));
    EXPECT_TRUE(report.verified) << report.mismatch;
    EXPECT_EQ(report.bytes, plan.summary().bytes);
    EXPECT_EQ(report.operations, plan.regions().size());
    EXPECT_EQ(report.messages, plan.summary().segments);
    EXPECT_EQ(report.packed_messages, 0u);
  }
}

TEST(LiveSessionTest, OneProcessCopiesLocally) {
  const auto source = Cube(2, 0);
  const auto target = Cube(4, 1);
  ASSERT_OK_AND_ASSIGN(auto report, RunSelfTest(source, target, Ucx({}, 1)));
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  EXPECT_TRUE(report.verified);
  EXPECT_EQ(report.bytes, plan.summary().bytes);
  EXPECT_EQ(report.operations, plan.regions().size());
  EXPECT_EQ(report.messages, 0u);
  EXPECT_EQ(report.ranks_ready, 1u);
}

// A store or rendezvous directory of its own.
class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("reshard-live-test") {}
};

struct FaultCase {
  SelfTestFault fault;
  std::string transport;
  std::string error;  // expected in the launcher's error
  LiveProtocol protocol = LiveProtocol::kAuto;  // on shm: pull
};

class LiveFaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(LiveFaultTest, EverySurvivorFailsAndNoTargetIsReady) {
  const FaultCase& c = GetParam();
  // Many small regions, so that a rank dies with work outstanding.
  const auto source = Must(WeightPlacementFromJson(
      ReadTestData("scenarios/four_axis_uint8_source.json")));
  const auto target = Must(WeightPlacementFromJson(
      ReadTestData("scenarios/four_axis_uint8_target.json")));
  TempDir dir;
  SelfTestOptions o =
      Ucx(c.transport == "tcp" ? UcxOptions{.tls = "tcp", .net_devices = "lo"}
                               : UcxOptions{},
          4);
  o.rendezvous = dir.path();
  o.session = "fault";
  o.fault = c.fault;
  o.protocol = c.protocol;
  o.timeout = std::chrono::seconds(10);
  const auto t0 = std::chrono::steady_clock::now();
  auto report = RunSelfTest(source, target, o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(report.status().message(),
              HasSubstr("live self-test failed: " + c.error));
  // The survivors stopped on the failure, not on their timeout.
  EXPECT_LT(seconds, 10.0);
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  EXPECT_TRUE(Must(store->List("fault/ready/")).empty());
  // Every rank either died or reported its own clear error.
  const auto reports = Must(store->List("fault/report/"));
  const bool killed = c.fault != SelfTestFault::kStaleGeneration;
  EXPECT_EQ(reports.size(), killed ? 3u : 4u);
  for (const std::string& key : reports) {
    const std::string text = Must(store->Get(key));
    SCOPED_TRACE(key + ": " + text);
    // "<code>: live session fault, rank R: <reason>", where the reason is
    // the peer's recorded abort, the lost endpoint, or the rank's own
    // fence failure.
    EXPECT_THAT(text, HasSubstr(": live session fault, rank "));
    const bool named =
        text.find("aborted by rank") != std::string::npos ||
        text.find("lost rank") != std::string::npos ||
        text.find("cannot connect to rank") != std::string::npos ||
        text.find("generation differs") != std::string::npos ||
        text.find("stopped answering") != std::string::npos ||
        text.find("failed as decided by rank") != std::string::npos;
    EXPECT_TRUE(named);
  }
  // The failed rank's reason is recorded for the others.
  EXPECT_FALSE(Must(store->List("fault/abort/")).empty());
}

std::string FaultName(const ::testing::TestParamInfo<FaultCase>& info) {
  static const char* const kNames[] = {"none", "KillSource", "KillTarget",
                                       "StaleGeneration"};
  return std::string(kNames[static_cast<int>(info.param.fault)]) + "_" +
         info.param.transport;
}

INSTANTIATE_TEST_SUITE_P(
    Faults, LiveFaultTest,
    ::testing::Values(
        FaultCase{SelfTestFault::kKillSource, "shm",
                  "rank 0 died of signal 9 (Killed)"},
        FaultCase{SelfTestFault::kKillSource, "tcp",
                  "rank 0 died of signal 9 (Killed)"},
        FaultCase{SelfTestFault::kKillSource, "shmpush",
                  "rank 0 died of signal 9 (Killed)", LiveProtocol::kPush},
        FaultCase{SelfTestFault::kKillTarget, "shmpush",
                  "rank 2 died of signal 9 (Killed)", LiveProtocol::kPush},
        FaultCase{SelfTestFault::kKillTarget, "shm",
                  "rank 2 died of signal 9 (Killed)"},
        FaultCase{SelfTestFault::kKillTarget, "tcp",
                  "rank 2 died of signal 9 (Killed)"},
        FaultCase{SelfTestFault::kStaleGeneration, "shm",
                  "rank 0: FailedPrecondition: live session fault, rank 0: "
                  "acquired runtime binding generation differs from plan: "
                  "source participant p-d0-p0-e0-t0: planned 1, current 2"}),
    FaultName);

// A rank whose peer never arrives fails at the timeout, naming the peer.
TEST(LiveSessionTest, MissingPeerTimesOut) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  SelfTestOptions o = Ucx({}, 2);
  o.rendezvous = dir.path();
  o.session = "lonely";
  o.rank = 0;
  o.timeout = std::chrono::milliseconds(500);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string error = InChild([&] {
    auto report = RunSelfTest(source, target, o);
    return report.ok() ? std::string("ok") : report.status().ToString();
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(
      error,
      "Unavailable: live session lonely, rank 0: live session lonely: "
      "timed out after 500 ms waiting for the published bindings of rank(s) "
      "1");
  EXPECT_LT(seconds, 5.0);
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  EXPECT_EQ(Must(internal::DecodeAbortRecord(Must(store->Get("lonely/abort/0")),
                                             "lonely/abort/0", 0)),
            error);
  EXPECT_TRUE(Must(store->List("lonely/ready/")).empty());
}

// A rank that gives up before running (its own inputs were invalid)
// records an abort; its peer stops at once naming it instead of waiting
// for the timeout, and no target is marked ready.
TEST(LiveSessionTest, AbortBeforeJoiningStopsPeersPromptly) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  ASSERT_OK(AbortLiveSession(*store, "gave-up", 1,
                             Status::InvalidArgument("bad target tensor")));
  // Put-once: a second abort keeps the first reason and is not an error.
  ASSERT_OK(AbortLiveSession(*store, "gave-up", 1,
                             Status::Internal("second reason")));
  EXPECT_EQ(Must(internal::DecodeAbortRecord(
                Must(store->Get("gave-up/abort/1")), "gave-up/abort/1", 1)),
            "InvalidArgument: bad target tensor");
  EXPECT_THAT(AbortLiveSession(*store, "bad/../key", 1, Status::Internal("x")),
              StatusIs(StatusCode::kInvalidArgument));
  SelfTestOptions o = Ucx({}, 2);
  o.rendezvous = dir.path();
  o.session = "gave-up";
  o.rank = 0;
  o.timeout = std::chrono::milliseconds(20000);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string error = InChild([&] {
    auto report = RunSelfTest(source, target, o);
    return report.ok() ? std::string("ok") : report.status().ToString();
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_THAT(error, HasSubstr("live session gave-up aborted by rank 1: "
                               "InvalidArgument: bad target tensor"));
  EXPECT_LT(seconds, 10.0);
  EXPECT_TRUE(Must(store->List("gave-up/ready/")).empty());
}

// Running the same launcher command twice used to print the first run's
// figures with "verified": true and exit 0 while both ranks of the second
// run failed ("record exists"): the launcher read the earlier run's
// reports. It now refuses a session that has records.
TEST(LiveSessionTest, LauncherRefusesASessionWithRecords) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  SelfTestOptions o = Ucx({}, 2);
  o.rendezvous = dir.path();
  o.session = "again";
  ASSERT_OK_AND_ASSIGN(auto first, RunSelfTest(source, target, o));
  EXPECT_TRUE(first.verified);
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  const auto records = Must(store->List("again/"));
  auto second = RunSelfTest(source, target, o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().ToString(),
            "AlreadyExists: live session again already has " +
                std::to_string(records.size()) + " record(s) in rendezvous " +
                dir.path() + " (" + records[0] +
                ", ...); use a new --session or remove them");
  // Nothing ran: the first run's records are as they were.
  EXPECT_EQ(Must(store->List("again/")), records);
}

// A malformed report record used to kill the launcher with an uncaught
// std::invalid_argument from stoull (SIGABRT; the child below then wrote
// nothing).
TEST(LiveSessionTest, MalformedReportRecordIsAnError) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  ASSERT_OK(store->Put("bad/report/1", "verified=1\nbytes=lots\n"));
  SelfTestOptions o = Ucx({}, 2);
  o.rendezvous = dir.path();
  o.session = "bad";
  o.timeout = std::chrono::seconds(2);
  const std::string error = InChild([&] {
    auto report = RunSelfTest(source, target, o);
    return report.ok() ? std::string("ok") : report.status().ToString();
  });
  EXPECT_EQ(error,
            "AlreadyExists: live session bad already has 1 record(s) "
            "in rendezvous " +
                dir.path() +
                " (bad/report/1); use a new --session or remove them");
}

// A rank joins a session once; other ranks' records are expected (ranks
// join one at a time), its own are not. Before, the rank published its
// bindings and then failed on "record exists".
TEST(LiveSessionTest, RankRefusesToJoinTwice) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  ASSERT_OK(store->Put("twice/address/0", "{}"));
  ASSERT_OK(store->Put("twice/rank/1", "{}"));
  SelfTestOptions o = Ucx({}, 2);
  o.rendezvous = dir.path();
  o.session = "twice";
  o.rank = 0;
  o.timeout = std::chrono::milliseconds(500);
  const std::string error = InChild([&] {
    auto report = RunSelfTest(source, target, o);
    return report.ok() ? std::string("ok") : report.status().ToString();
  });
  EXPECT_EQ(error,
            "AlreadyExists: live session twice: rank 0 already has 1 "
            "record(s) (twice/address/0) from an earlier run; use a new "
            "session key");
  EXPECT_EQ(Must(store->List("twice/")),
            (std::vector<std::string>{"twice/address/0", "twice/rank/1"}));
}

// Rank 1's records as a peer would publish them, with `address` as its
// address record; rank 0 (all sources) then reads them.
void PublishPeer(RecordStore& store, const std::string& session,
                 const WeightPlacementManifest& target,
                 const std::string& address) {
  auto buffers = Must(internal::AllocateHostBuffers(target, "peer"));
  for (size_t i = 0; i < buffers.bindings.size(); ++i) {
    ASSERT_OK(store.Put(session + "/bindings/1/target-" + std::to_string(i),
                        WeightRuntimeBindingToJson(buffers.bindings[i])));
  }
  ASSERT_OK(store.Put(session + "/address/1", address));
  ASSERT_OK(store.Put(session + "/rank/1",
                      internal::EncodeRankRecord({"elsewhere", 1, 2})));
}

std::string RunRankZero(const std::string& dir, const std::string& session) {
  SelfTestOptions o = Ucx({}, 2);
  o.rendezvous = dir;
  o.session = session;
  o.rank = 0;
  o.timeout = std::chrono::seconds(2);
  return InChild([&] {
    auto report = RunSelfTest(Cube(2, 0), Cube(2, 1), o);
    return report.ok() ? std::string("ok") : report.status().ToString();
  });
}

// 64 bytes of 0x02 as a peer's address used to reach ucp_ep_create, which
// failed an assertion and killed the rank (the child wrote nothing).
TEST(LiveSessionTest, MalformedPeerAddressIsAnError) {
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  const std::string garbage(64, '\x02');
  PublishPeer(*store, "raw", Cube(2, 1), garbage);
  EXPECT_THAT(RunRankZero(dir.path(), "raw"),
              ::testing::StartsWith(
                  "InvalidArgument: live session raw, rank 0: malformed "
                  "address record raw/address/1: invalid JSON: "));
  // Well-formed record, SHA-256 and all, of bytes no UCX wrote.
  PublishPeer(*store, "forged", Cube(2, 1),
              internal::EncodeAddressRecord(1, garbage));
  const std::string error = RunRankZero(dir.path(), "forged");
  EXPECT_THAT(error, ::testing::StartsWith(
                         "InvalidArgument: live session forged, rank 0: "
                         "cannot connect to rank 1 ("));
  EXPECT_THAT(error, ::testing::EndsWith(
                         "): UCX worker address has format version 2, this "
                         "UCX writes version 0"));
  // The failure is recorded for the others.
  EXPECT_EQ(Must(internal::DecodeAbortRecord(Must(store->Get("forged/abort/0")),
                                             "forged/abort/0", 0)),
            error);
}

// --procs 4096 used to fork 4096 UCX ranks; counts beyond what the
// placements can use (one rank per participant with fragments) or the cap
// are refused before anything starts.
TEST(LiveSessionTest, AbsurdProcessCountsAreRefused) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  SelfTestOptions o = Ucx({}, 5);
  o.rendezvous = dir.path();
  o.session = "many";
  auto five = RunSelfTest(source, target, o);
  ASSERT_FALSE(five.ok());
  EXPECT_EQ(five.status().message(),
            "--procs 5 is more than the 4 processes the placements can use "
            "(2 source and 2 target participants with fragments)");
  o.procs = 4096;
  auto many = RunSelfTest(source, target, o);
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().message(),
            "--procs 4096 is over the limit of 64 processes");
  o.procs = 65;
  o.rank = 3;
  EXPECT_EQ(RunSelfTest(source, target, o).status().message(),
            "--procs 65 is over the limit of 64 processes");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// A rendezvous URI with a scheme this build does not support used to
// become a relative directory named after the scheme ("redis:").
TEST(LiveSessionTest, UnsupportedRendezvousUriIsRefused) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  SelfTestOptions o = Ucx({}, 2);
  o.rendezvous = "s3://h:1";
  o.session = "s";
  auto r = RunSelfTest(source, target, o);
  std::filesystem::current_path(cwd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().ToString(),
            "InvalidArgument: unsupported rendezvous URI \"s3://h:1\" "
            "(supported: fs://PATH or a directory, redis://HOST:PORT, "
            "unix:///PATH)");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  // fs:// names a directory.
  o.rendezvous = "fs://" + dir.path() + "/rdv";
  ASSERT_OK_AND_ASSIGN(auto ok, RunSelfTest(source, target, o));
  EXPECT_TRUE(ok.verified);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/rdv/s/done/1"));
}

// A binding on CUDA memory is refused before UCX sees its pointer (the
// exchange used to send it as host memory).
TEST(LiveSessionTest, DeviceMemoryIsRefusedBeforeAnyTransfer) {
  if (QueryCuda().devices > 0) {
    GTEST_SKIP() << "this machine has a CUDA device: CUDA fragments are "
                    "mirrored in pinned host memory, not refused";
  }
  const auto source = Cube(2, 0);
  const auto target = Cube(4, 1);
  auto src = Must(internal::AllocateHostBuffers(source, "source"));
  auto dst = Must(internal::AllocateHostBuffers(target, "target"));
  for (auto& [id, p] : dst.data) {
    std::memset(p, 0xD7, target.FindFragment(id)->nbytes());
  }
  std::vector<WeightRuntimeBindingManifest> on_gpu;
  for (const auto& b : dst.bindings) {
    on_gpu.push_back(Must(WithBindingChanges(b, {.device = "cuda:0"})));
  }
  TempDir dir;
  // In a child: a process that initialised UCX must not fork the later
  // tests' ranks.
  const std::string error = InChild([&] {
    auto rdv = Must(OpenRendezvous(dir.path()));
    LiveSessionOptions o;
    o.session = "gpu";
    o.timeout = std::chrono::milliseconds(10000);
    auto r = RunLiveReshard(*rdv, source, target, {src.bindings, on_gpu}, o);
    std::string out = r.ok() ? "ok" : r.status().message();
    for (const auto& [id, p] : dst.data) {
      if (p[0] != 0xD7) out += " [target written: " + std::string(id) + "]";
    }
    return out;
  });
  // The first target binding's first fragment (participants and their
  // fragments in order), in one line.
  const auto& first = on_gpu[0];
  EXPECT_THAT(
      error,
      ::testing::EndsWith(
          "ucx executor cannot move cuda memory: target fragment " +
          first.fragments()[0].placement_fragment_id() + " of participant " +
          first.participant_id() + " (device \"cuda:0\")"));
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

// Session options are checked before anything is published.
TEST(LiveSessionTest, InvalidSessionOptions) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  LiveSessionOptions o;
  o.session = "a/b";
  auto r = RunLiveReshard(*store, source, target, {}, o);
  EXPECT_EQ(r.status().message(),
            "live session key must be one record-key component, got \"a/b\"");
  o.session = "s";
  o.ranks = 2;
  o.rank = 2;
  r = RunLiveReshard(*store, source, target, {}, o);
  EXPECT_EQ(r.status().message(), "live session: rank 2 is not below 2 ranks");
  o.rank = 0;
  o.exchange = "nixl";
  r = RunLiveReshard(*store, source, target, {}, o);
  // The built-in exchanges, and any a test of this process registered
  // (names sort after them: "cuda-ipc-emulated", "nccl-device").
  std::string registered;
  for (const std::string& name : RegisteredPeerExchanges()) {
    registered += (registered.empty() ? "" : ", ") + name;
  }
  EXPECT_THAT(registered,
              ::testing::MatchesRegex("cuda-ipc(, cuda-ipc-direct)?(, "
                                      "cuda-ipc-emulated)?, inproc, nccl(, "
                                      "nccl-device)?, ucx"));
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          "live session: unknown peer exchange \"nixl\" "
                          "(registered: " +
                              registered + ")"));
  // Each exchange checks its own settings before anything is published.
  o.exchange = "inproc";
  o.exchange_options.Set("tls", "tcp");
  r = RunLiveReshard(*store, source, target, {}, o);
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          "live session: peer exchange \"inproc\" has no "
                          "setting \"tls\" (it takes none)"));
  o.exchange = "ucx";
  o.exchange_options = {};
  o.exchange_options.Set("tsl", "tcp");
  r = RunLiveReshard(*store, source, target, {}, o);
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          HasSubstr("live session: peer exchange \"ucx\" has "
                                    "no setting \"tsl\"")));
  o.exchange_options = {};
  SelfTestOptions threads = Ucx({}, 2);
  threads.transport = "inproc";
  threads.rank = 1;
  EXPECT_EQ(RunSelfTest(source, target, threads).status().message(),
            "the inproc transport runs every rank as a thread of one process: "
            "it cannot run a single --rank or kill a rank (use ucx)");
  threads.rank.reset();
  threads.fault = SelfTestFault::kKillTarget;
  EXPECT_EQ(RunSelfTest(source, target, threads).status().message(),
            "the inproc transport runs every rank as a thread of one process: "
            "it cannot run a single --rank or kill a rank (use ucx)");
  SelfTestOptions so = Ucx({}, 2);
  so.rank = 1;
  auto rep = RunSelfTest(source, target, so);
  EXPECT_EQ(rep.status().message(),
            "--rank needs --rendezvous DIR shared by every rank");
  // UCX 1.13 keeps a shared-memory fragment's length in 16 bits.
  so = Ucx({.shm_segment_bytes = 65536}, 2);
  rep = RunSelfTest(source, target, so);
  const std::string why =
      "UCX shared-memory segment of 65536 bytes: UCX 1.13 needs it below "
      "65536";
  const std::string message(rep.status().message());
  ASSERT_GE(message.size(), why.size()) << message;
  EXPECT_EQ(message.substr(message.size() - why.size()), why) << message;
}

// ---------------------------------------------------------------------------
// Standing sessions.

// K updates of one session, the source pattern changing with each: every
// target byte is checked after every update (a region skipped in update k
// still holds k - 1's bytes), over shared memory and TCP, pushed and
// pulled; the ranks leave no record of the session behind.
TEST(StandingSessionTest, UpdatesAreVerifiedEachTimeAndRecordsRemoved) {
  const ModelSpec model = Must(
      ModelSpecFromJson(ReadTestData("../../examples/models/tiny-moe.json")));
  const auto source = Must(
      GenerateLayout(model, {.sizes = {.tp = 4, .pp = 2, .ep = 8, .dp = 2}}));
  const auto target = Must(
      GenerateLayout(model, {.sizes = {.tp = 8, .pp = 4, .ep = 2, .dp = 4}}));
  for (const NamedUcx& t : Exchanges()) {
    SCOPED_TRACE(t.name);
    TempDir dir;
    SelfTestOptions o = Over(t, 3);
    o.rendezvous = dir.path();
    o.session = "steps";
    o.updates = 4;
    ASSERT_OK_AND_ASSIGN(auto report, RunSelfTest(source, target, o));
    ExpectLiveVerified(report, source, target, 3);
    ASSERT_EQ(report.update_seconds.size(), 4u);
    EXPECT_GT(report.open_seconds, 0.0);
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    // Only the launcher's own report records remain.
    for (const std::string& key : Must(store->List("steps/"))) {
      EXPECT_TRUE(key.starts_with("steps/report/")) << key;
    }
  }
}

// Delta updates over every exchange: after the first update only the
// changed elements travel, and every target byte is checked after every
// update. A change of 1% costs at most 5% of the full update on the wire,
// 60% no more than 1.05x; a target buffer overwritten between updates gets
// its regions whole in the next update, and is right again.
TEST(StandingSessionTest, DeltaUpdatesVerifyAtEveryChangeFraction) {
  // uint8 [8, 64, 4096] from dim 0 to dim 2: 16 regions of 128 KiB.
  const auto source = testing::CubeLayout(4, 0, {8, 64, 4096});
  const auto target = testing::CubeLayout(4, 2, {8, 64, 4096});
  for (const NamedUcx& t : Exchanges()) {
    for (double fraction : {0.0, 0.01, 0.1, 0.6}) {
      SCOPED_TRACE(t.name + ", fraction " + std::to_string(fraction));
      SelfTestOptions o = Over(t, 2, LiveProtocol::kPush);
      o.updates = 3;
      o.delta = true;
      o.change_fraction = fraction;
      // The denser changes encode on three threads (more threads than
      // some parts have messages), the others on one.
      o.delta_threads = fraction >= 0.1 ? 3 : 1;
      ASSERT_OK_AND_ASSIGN(auto r, RunSelfTest(source, target, o));
      ExpectLiveVerified(r, source, target, 2);
      ASSERT_EQ(r.wire_bytes.size(), 3u);
      EXPECT_GE(r.wire_bytes[0], r.bytes);   // the first update is full
      EXPECT_EQ(r.snapshot_bytes, r.bytes);  // every region crosses ranks
      for (size_t k = 1; k < 3; ++k) {
        EXPECT_EQ(r.delta_regions[k] + r.full_regions[k], 16u);
        const double ratio =
            static_cast<double>(r.wire_bytes[k]) / r.wire_bytes[0];
        if (fraction <= 0.01) {
          EXPECT_LE(ratio, 0.05) << k;
        }
        if (fraction == 0.6) {
          EXPECT_LE(ratio, 1.05) << k;
        }
        if (fraction < 0.5) {
          EXPECT_EQ(r.full_regions[k], 0u) << k;
        }
      }
    }
    SCOPED_TRACE(t.name + ", targets overwritten after update 1");
    SelfTestOptions o = Over(t, 2, LiveProtocol::kPush);
    o.updates = 3;
    o.delta = true;
    o.change_fraction = 0.01;
    o.fault = SelfTestFault::kOverwriteTargets;
    ASSERT_OK_AND_ASSIGN(auto r, RunSelfTest(source, target, o));
    ExpectLiveVerified(r, source, target, 2);
    EXPECT_EQ(r.full_regions, (std::vector<uint64_t>{0, 16, 0}));
    EXPECT_EQ(r.delta_regions, (std::vector<uint64_t>{0, 0, 16}));
  }
}

// A source rank dies between update 1 and update 2: the survivors fail
// update 2 naming it, and no target is marked ready for it.
TEST(StandingSessionTest, RankKilledBetweenUpdatesFailsTheNextUpdate) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  for (const NamedUcx& t : Transports()) {
    SCOPED_TRACE(t.name);
    TempDir dir;
    SelfTestOptions o = Ucx(t.ucx, 2, t.protocol);
    o.rendezvous = dir.path();
    o.session = "dies";
    o.updates = 3;
    o.timeout = std::chrono::seconds(5);
    o.fault = SelfTestFault::kKillBetweenUpdates;
    auto report = RunSelfTest(source, target, o);
    ASSERT_FALSE(report.ok());
    EXPECT_THAT(report.status().message(),
                HasSubstr("rank 0 died of signal 9"));
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    EXPECT_TRUE(Must(store->List("dies/u/2/ready/")).empty());
    // The launcher recorded rank 0's death as final (it is not started
    // again), so the survivor's session is over at once: it recorded why
    // it stopped, naming rank 0.
    auto abort = store->Get("dies/abort/1");
    ASSERT_OK(abort.status());
    const std::string reason =
        Must(internal::DecodeAbortRecord(*abort, "dies/abort/1", 1));
    EXPECT_THAT(reason,
                HasSubstr("aborted by rank 0: rank 0 died of signal 9"));
  }
}

// Two ranks in two processes with the library API: rank 0 hosts the
// sources, rank 1 the targets; `body` runs rank r's side of a session.
std::vector<std::string> TwoRanks(
    const std::function<std::string(uint32_t rank)>& body) {
  return InChildren(2, body);
}

using ::reshard::testing::Seat;
using ::reshard::testing::SeatOf;

// A rank that re-allocates its buffers between updates passes the new
// bindings to Update. Targets are rebound locally under push and pull
// alike, and the new buffers receive update 2. Sources follow one rule
// whatever the protocol (and so on one host and across hosts): moved
// sources are refused before any byte moves, the peer failing naming the
// rank, unless the session was opened with movable_sources (push), which
// rebinds them.
TEST(StandingSessionTest, MovedBuffersFollowOneRuleUnderEveryProtocol) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  const auto tensors = internal::TensorIndex(source);
  struct Case {
    std::string name;
    LiveProtocol protocol;
    bool movable_sources;
    bool sources_move;
  };
  const std::vector<Case> cases = {
      {"push, targets move", LiveProtocol::kPush, false, false},
      {"pull, targets move", LiveProtocol::kPull, false, false},
      {"push, sources move", LiveProtocol::kPush, false, true},
      {"pull, sources move", LiveProtocol::kPull, false, true},
      {"auto + movable sources", LiveProtocol::kAuto, true, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    const auto out = TwoRanks([&](uint32_t rank) -> std::string {
      auto store = Must(OpenDirectoryRecordStore(dir.path()));
      Seat seat = SeatOf(source, target, rank, "moved-" + std::to_string(rank));
      LiveSessionOptions lo;
      lo.session = "moved";
      lo.rank = rank;
      lo.ranks = 2;
      lo.protocol = c.protocol;
      lo.movable_sources = c.movable_sources;
      lo.timeout = std::chrono::seconds(10);
      auto session =
          LiveSession::Open(*store, source, target, seat.bindings, lo);
      if (!session.ok()) return "open: " + session.status().ToString();
      internal::FillPattern(source, tensors, seat.buffers, nullptr, 1);
      auto u1 = (*session)->Update(1);
      if (!u1.ok()) return "update 1: " + u1.status().ToString();
      Seat moved =
          SeatOf(source, target, rank, "moved-" + std::to_string(rank));
      const bool moves = c.sources_move ? rank == 0 : rank == 1;
      const Seat& now = moves ? moved : seat;
      internal::FillPattern(source, tensors, now.buffers, nullptr, 2);
      auto u2 = (*session)->Update(2, &now.bindings);
      if (!u2.ok()) return "update 2: " + u2.status().ToString();
      if (rank == 1) {
        const std::string bad =
            internal::VerifyPattern(target, tensors, now.buffers, nullptr, 2);
        if (!bad.empty()) return "mismatch: " + bad;
      }
      if (Status st = (*session)->Close(); !st.ok()) return st.ToString();
      return std::string(u2->rebound && moves ? "rebound" : "ok");
    });
    if (!c.sources_move) {
      EXPECT_EQ(out[0], "ok");
      EXPECT_EQ(out[1], "rebound");
    } else if (c.movable_sources) {
      EXPECT_EQ(out[0], "rebound");
      EXPECT_EQ(out[1], "ok");
    } else {
      EXPECT_EQ(out[0],
                "update 2: FailedPrecondition: live session moved, rank 0, "
                "update 2: live session moved: source "
                "participant p-d0-p0-e0-t0 moved (its bindings changed since "
                "open), and the session was opened without movable_sources: "
                "keep sources in place, or open with movable_sources (push) "
                "(the session stays open: retry the update or run the next "
                "one)");
      // The refusal is the update's outcome: rank 1 fails it too, naming
      // rank 0, with nothing in flight.
      EXPECT_THAT(out[1], HasSubstr("update 2: Aborted: live session moved "
                                    "failed as decided by rank 0: "));
    }
  }
}

// Targets rebound into CUDA memory at an update are refused by the rank
// that moved them, naming the fragment, before anything moves: the
// exchange ("ucx") moves host memory only (PeerExchangeCapabilities::
// memory_kinds) and there is no CUDA executor to mirror them through
// pinned host memory (device_mirrors_test.cc).
TEST(StandingSessionTest, DeviceMemoryAtAnUpdateIsRefusedNamingTheFragment) {
  if (QueryCuda().devices > 0) {
    GTEST_SKIP() << "this machine has a CUDA device: CUDA fragments are "
                    "mirrored in pinned host memory, not refused";
  }
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  std::string fragment, participant;  // rank 1's first target fragment
  {
    Seat seat = SeatOf(source, target, 1, "gpu-1");
    fragment = seat.bindings.targets[0].fragments()[0].placement_fragment_id();
    participant = seat.bindings.targets[0].participant_id();
  }
  const auto out = TwoRanks([&](uint32_t rank) -> std::string {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(source, target, rank, "gpu-" + std::to_string(rank));
    LiveSessionOptions lo;
    lo.session = "gpu-update";
    lo.rank = rank;
    lo.ranks = 2;
    lo.timeout = std::chrono::seconds(10);
    auto session = LiveSession::Open(*store, source, target, seat.bindings, lo);
    if (!session.ok()) return "open: " + session.status().ToString();
    if (auto u1 = (*session)->Update(1); !u1.ok()) {
      return "update 1: " + u1.status().ToString();
    }
    LiveBindings now = seat.bindings;
    for (auto& b : now.targets) {
      b = Must(WithBindingChanges(b, {.device = "cuda:0"}));
    }
    auto u2 = (*session)->Update(2, &now);
    return u2.ok() ? std::string("update 2: ok") : u2.status().message();
  });
  EXPECT_EQ(out[1],
            "live session gpu-update, rank 1, update 2: ucx executor cannot "
            "move cuda memory: target fragment " +
                fragment + " of participant " + participant +
                " (device \"cuda:0\") (the session stays open: retry the "
                "update or run the next one)");
  EXPECT_THAT(out[0], HasSubstr("failed as decided by rank 1: "));
}

// Generations only go up; a closed or failed session refuses updates.
TEST(StandingSessionTest, GenerationsAscendAndClosedSessionsRefuse) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  const auto out = TwoRanks([&](uint32_t rank) -> std::string {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(source, target, rank, "gen-" + std::to_string(rank));
    LiveSessionOptions lo;
    lo.session = "gen";
    lo.rank = rank;
    lo.ranks = 2;
    lo.timeout = std::chrono::seconds(10);
    auto session = LiveSession::Open(*store, source, target, seat.bindings, lo);
    if (!session.ok()) return session.status().ToString();
    if (auto u = (*session)->Update(5); !u.ok()) return u.status().ToString();
    std::string out = (*session)->Update(5).status().ToString() + "|";
    if (Status st = (*session)->Close(); !st.ok()) return st.ToString();
    out += (*session)->Update(6).status().ToString();
    return out;
  });
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r],
              "InvalidArgument: live session gen: update generation 5 is not "
              "above the previous update's 5|FailedPrecondition: live session "
              "gen is closed");
  }
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  EXPECT_TRUE(Must(store->List("gen/")).empty());
}

// Shadow mode: targets receive into shadow buffers and see an update only
// after the world barrier. Update 2 fails after its bytes arrived (the
// target's validator refuses): the serving buffers still hold update 1,
// byte for byte; without shadows they would hold update 2's bytes.
TEST(StandingSessionTest, ShadowTargetsKeepServingWeightsOnFailure) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  const auto tensors = internal::TensorIndex(source);
  for (const auto& mode : {std::pair{true, false}, std::pair{false, false},
                           std::pair{true, true}}) {
    // Copies: lambdas below capture them (not structured bindings).
    const bool shadow = mode.first;
    const bool delta = mode.second;
    SCOPED_TRACE(std::string(shadow ? "shadow" : "in place") +
                 (delta ? ", delta" : ""));
    TempDir dir;
    const auto out = TwoRanks([&](uint32_t rank) -> std::string {
      auto store = Must(OpenDirectoryRecordStore(dir.path()));
      Seat seat =
          SeatOf(source, target, rank, "shadow-" + std::to_string(rank));
      uint64_t generation = 0;
      LiveSessionOptions lo;
      lo.session = "shadow";
      lo.rank = rank;
      lo.ranks = 2;
      lo.timeout = std::chrono::seconds(10);
      lo.shadow_targets = shadow;
      lo.delta = delta;  // update 2 is a delta into the shadows
      lo.validate_targets = [&]() -> Status {
        return generation == 2 ? Status::DataLoss("refused by the validator")
                               : Status::OK();
      };
      auto session =
          LiveSession::Open(*store, source, target, seat.bindings, lo);
      if (!session.ok()) return "open: " + session.status().ToString();
      std::string out;
      for (generation = 1; generation <= 2; ++generation) {
        internal::FillPattern(source, tensors, seat.buffers, nullptr,
                              generation);
        auto u = (*session)->Update(generation);
        out += u.ok() ? "ok|" : "failed|";
      }
      if (rank == 1) {
        out +=
            internal::VerifyPattern(target, tensors, seat.buffers, nullptr, 1)
                    .empty()
                ? "serving holds update 1"
                : "serving changed";
      }
      return out;
    });
    EXPECT_EQ(out[0], "ok|failed|");
    EXPECT_EQ(out[1], shadow ? "ok|failed|serving holds update 1"
                             : "ok|failed|serving changed");
  }
}

// The target rank dies during update 2, after its first receive, while
// the source rank still has sends in flight: the source's update fails
// with an uncertain outcome (its buffers may still be read), no target is
// marked ready for update 2, and the session refuses further updates.
TEST(StandingSessionTest, PeerDeathMidUpdateIsUncertainForTheSender) {
  // Four regions of 8 MiB: each is its own message (no coalescing).
  const auto source = testing::CubeLayout(2, 0, {4, 2048, 4096});
  const auto target = testing::CubeLayout(2, 1, {4, 2048, 4096});
  const auto tensors = internal::TensorIndex(source);
  // Update 2 moves every byte, or (delta) every region's changes.
  for (bool delta : {false, true}) {
    SCOPED_TRACE(delta ? "delta" : "full");
    TempDir dir;
    const auto out = TwoRanks([&](uint32_t rank) -> std::string {
      auto store = Must(OpenDirectoryRecordStore(dir.path()));
      Seat seat = SeatOf(source, target, rank, "dies-" + std::to_string(rank));
      uint64_t generation = 0;
      LiveSessionOptions lo;
      lo.session = "midway";
      lo.rank = rank;
      lo.ranks = 2;
      lo.protocol = LiveProtocol::kPush;
      lo.max_in_flight = 1;  // the other sends wait behind the first
      lo.timeout = std::chrono::seconds(3);
      lo.delta = delta;
      if (rank == 1) {
        lo.on_stage = [&](std::string_view stage) {
          if (stage == "transfer" && generation == 2) ::raise(SIGKILL);
        };
      }
      auto session =
          LiveSession::Open(*store, source, target, seat.bindings, lo);
      if (!session.ok()) return "open: " + session.status().ToString();
      std::string out;
      for (generation = 1; generation <= 2; ++generation) {
        internal::FillPattern(source, tensors, seat.buffers, nullptr,
                              generation);
        auto u = (*session)->Update(generation);
        if (!u.ok()) {
          out += u.status().ToString();
          break;
        }
        out += "ok|";
      }
      const LiveOutcome o = (*session)->outcome();
      out += o == LiveOutcome::kUncertain ? "|uncertain"
             : o == LiveOutcome::kFailed  ? "|failed"
                                          : "|ok";
      out += "|" + (*session)->Update(3).status().ToString();
      return out;
    });
    EXPECT_THAT(out[0], HasSubstr("ok|"));
    EXPECT_THAT(out[0], HasSubstr("outcome uncertain ("));
    EXPECT_THAT(out[0], HasSubstr("do not free or reuse this rank's buffers"));
    EXPECT_THAT(out[0], HasSubstr("rank 0 must rejoin, a new process opening "
                                  "with rejoin"));
    EXPECT_THAT(out[0],
                HasSubstr("|uncertain|FailedPrecondition: live session midway "
                          "left operations of this rank in flight in an "
                          "earlier update; this rank must rejoin (a new "
                          "process opening with rejoin)"));
    EXPECT_EQ(out[1], "");  // killed
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    EXPECT_TRUE(Must(store->List("midway/u/2/ready/")).empty());
  }
}

TEST(StandingSessionTest, RemoveLiveSessionReclaimsLeftovers) {
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  ASSERT_OK(store->Put("crashed/rank/0", "x"));
  ASSERT_OK(store->Put("crashed/u/3/done/1", "y"));
  ASSERT_OK(store->Put("other/rank/0", "z"));
  ASSERT_OK_AND_ASSIGN(uint64_t removed, RemoveLiveSession(*store, "crashed"));
  EXPECT_EQ(removed, 2u);
  EXPECT_TRUE(Must(store->List("crashed/")).empty());
  EXPECT_EQ(Must(store->List("other/")).size(), 1u);
  EXPECT_THAT(RemoveLiveSession(*store, "../x").status(),
              StatusIs(StatusCode::kInvalidArgument));
}

// A RecordStore that answers the first List under `prefix` with what it
// held, but only after `delay`: a rank whose poll of a barrier saw an
// incomplete world and then lost the processor while the others moved on.
class SlowListStore : public RecordStore {
 public:
  SlowListStore(RecordStore& base, std::string prefix,
                std::chrono::milliseconds delay)
      : base_(base), prefix_(std::move(prefix)), delay_(delay) {}
  Status Put(std::string_view key, std::string_view value) override {
    return base_.Put(key, value);
  }
  Result<std::string> Get(std::string_view key) override {
    return base_.Get(key);
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    auto keys = base_.List(prefix);
    if (!slowed_ && prefix.starts_with(prefix_)) {
      slowed_ = true;
      std::this_thread::sleep_for(delay_);
    }
    return keys;
  }
  Status Delete(std::string_view key) override { return base_.Delete(key); }

 private:
  RecordStore& base_;
  const std::string prefix_;
  const std::chrono::milliseconds delay_;
  bool slowed_ = false;
};

// Three ranks: rank 0 hosts the sources, rank 1 the targets, rank 2
// nothing (it still passes every barrier).
Seat SeatOfThree(const WeightPlacementManifest& source,
                 const WeightPlacementManifest& target, uint32_t rank,
                 const std::string& instance) {
  if (rank == 2) return Seat{};
  return SeatOf(source, target, rank, instance);
}

// The desync of a standing session: rank 1 refuses update 2 (its fence
// fails) while rank 2 is still finishing update 1, its barrier poll having
// seen an incomplete world. Rank 2 must not take update 2's abort for
// update 1's (which completed everywhere): update 1 succeeds on every
// rank, update 2 fails on every rank, and the session reopened by every
// rank runs update 3 on every rank. Repeated over shared memory and TCP.
TEST(StandingSessionTest, RefusedUpdateNeverDesynchronisesTheRanks) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  const auto tensors = internal::TensorIndex(source);
  // Ten times as slow under sanitizers: fewer runs there.
  constexpr int kRepeats = testing::kSanitized ? 10 : 50;
  for (const NamedUcx& t : {Transports()[0], Transports()[2]}) {
    for (int repeat = 0; repeat < kRepeats; ++repeat) {
      SCOPED_TRACE(t.name + ", run " + std::to_string(repeat));
      TempDir dir;
      const auto out = InChildren(3, [&](uint32_t rank) -> std::string {
        auto base = Must(OpenDirectoryRecordStore(dir.path()));
        // Rank 2 polls update 1's barrier slowly, once.
        SlowListStore slow(*base, "a/u/1/done/",
                           std::chrono::milliseconds(rank == 2 ? 300 : 0));
        Seat seat =
            SeatOfThree(source, target, rank, "desync-" + std::to_string(rank));
        uint64_t generation = 0;
        LiveSessionOptions lo;
        lo.rank = rank;
        lo.ranks = 3;
        lo.exchange_options = ToPeerExchangeOptions(t.ucx);
        lo.protocol = t.protocol;
        lo.timeout = std::chrono::seconds(20);
        lo.current_bindings = [&]() -> Result<LiveBindings> {
          if (rank == 1 && generation == 2) {
            return Status::InvalidArgument("rank 1 refused its tensors");
          }
          return seat.bindings;
        };
        std::string out;
        std::unique_ptr<LiveSession> session;
        for (generation = 1; generation <= 3; ++generation) {
          if (session == nullptr) {  // opened again after a failure
            lo.session = generation == 1 ? "a" : "b";
            auto opened =
                LiveSession::Open(slow, source, target, seat.bindings, lo);
            if (!opened.ok())
              return out + "open: " + opened.status().ToString();
            session = std::move(*opened);
          }
          if (rank == 0) {
            internal::FillPattern(source, tensors, seat.buffers, nullptr,
                                  generation);
          }
          auto u = session->Update(generation);
          if (!u.ok()) {
            out += std::to_string(generation) +
                   " failed: " + u.status().ToString() + "|";
            session.reset();
            continue;
          }
          if (rank == 1) {
            const std::string bad = internal::VerifyPattern(
                target, tensors, seat.buffers, nullptr, generation);
            if (!bad.empty()) return out + "mismatch: " + bad;
          }
          out += std::to_string(generation) + " ok|";
        }
        if (Status st = session->Close(); !st.ok()) return out + st.ToString();
        return out;
      });
      for (uint32_t r = 0; r < 3; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r) + ": " + out[r]);
        EXPECT_TRUE(out[r].starts_with("1 ok|2 failed: "));
        EXPECT_TRUE(out[r].ends_with("|3 ok|"));
        EXPECT_THAT(out[r], HasSubstr("rank 1 refused its tensors"));
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Target declarations (engine parameter-map fingerprints): each rank's
// declaration reaches every other rank's check at open, a rank that
// declares nothing is seen as empty, and a check that refuses fails the
// open on every rank, naming the refusal, before anything moves. An
// accepted session runs, and its declaration records leave with it.
TEST(StandingSessionTest, TargetDeclarationsAreCheckedAtOpen) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  const auto tensors = internal::TensorIndex(source);
  for (const bool refuse : {false, true}) {
    SCOPED_TRACE(refuse ? "refused" : "accepted");
    TempDir dir;
    const auto out = InChildren(3, [&](uint32_t rank) -> std::string {
      auto store = Must(OpenDirectoryRecordStore(dir.path()));
      Seat seat =
          SeatOfThree(source, target, rank, "decl-" + std::to_string(rank));
      LiveSessionOptions lo;
      lo.session = "d";
      lo.rank = rank;
      lo.ranks = 3;
      lo.exchange_options = ToPeerExchangeOptions(Transports()[0].ucx);
      lo.timeout = std::chrono::seconds(20);
      if (rank == 1) lo.target_declaration = refuse ? "maps v2" : "maps v1";
      std::string seen;
      if (rank == 0) {
        lo.check_target_declaration = [&](uint32_t r, std::string_view d) {
          seen += std::to_string(r) + "=" + std::string(d) + ";";
          if (r == 1 && d != "maps v1") {
            return Status::FailedPrecondition("rank 1 declares " +
                                              std::string(d));
          }
          return Status::OK();
        };
      }
      auto opened =
          LiveSession::Open(*store, source, target, seat.bindings, lo);
      if (!opened.ok()) return seen + "open: " + opened.status().ToString();
      if (rank == 0) {
        internal::FillPattern(source, tensors, seat.buffers, nullptr, 1);
      }
      auto u = (*opened)->Update(1);
      if (!u.ok()) return seen + "update: " + u.status().ToString();
      if (rank == 1) {
        const std::string bad =
            internal::VerifyPattern(target, tensors, seat.buffers, nullptr, 1);
        if (!bad.empty()) return "mismatch: " + bad;
      }
      if (Status st = (*opened)->Close(); !st.ok()) return st.ToString();
      return seen + "ok";
    });
    if (!refuse) {
      EXPECT_EQ(out[0], "1=maps v1;2=;ok");
      EXPECT_EQ(out[1], "ok");
      EXPECT_EQ(out[2], "ok");
      auto store = Must(OpenDirectoryRecordStore(dir.path()));
      EXPECT_THAT(Must(store->List("d/declared/")), ::testing::IsEmpty());
      continue;
    }
    EXPECT_THAT(out[0], HasSubstr("1=maps v2;open: "));
    for (uint32_t r = 0; r < 3; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r) + ": " + out[r]);
      EXPECT_THAT(out[r], HasSubstr("rank 1 declares maps v2"));
      EXPECT_THAT(out[r], ::testing::Not(HasSubstr("update:")));
    }
  }
}

// A rank killed in the middle of a standing session (while the others
// wait for it in a barrier, or while it receives) is named by every
// survivor within 2 s with the default heartbeat options, although the
// session timeout is a minute.
TEST(StandingSessionTest, KilledRankIsNamedWithinTwoSeconds) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  const auto tensors = internal::TensorIndex(source);
  struct Case {
    std::string name;
    NamedUcx transport;
    uint32_t victim;
    std::string stage;  // killed on reaching it in update 2
  };
  const std::vector<Case> cases = {
      {"idle rank, shm", Transports()[0], 2, "completing"},
      {"idle rank, tcp", Transports()[2], 2, "completing"},
      {"receiving rank, shm push", Transports()[1], 1, "transfer"},
      {"receiving rank, tcp", Transports()[2], 1, "transfer"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    const std::string clock_file = dir.path() + "/killed-at";
    const auto out = InChildren(3, [&](uint32_t rank) -> std::string {
      auto store = Must(OpenDirectoryRecordStore(dir.path()));
      Seat seat =
          SeatOfThree(source, target, rank, "killed-" + std::to_string(rank));
      uint64_t generation = 0;
      LiveSessionOptions lo;
      lo.session = "killed";
      lo.rank = rank;
      lo.ranks = 3;
      lo.exchange_options = ToPeerExchangeOptions(c.transport.ucx);
      lo.protocol = c.transport.protocol;
      lo.timeout = std::chrono::seconds(60);
      const auto now_ns = [] {
        return std::chrono::steady_clock::now().time_since_epoch().count();
      };
      if (rank == c.victim) {
        lo.on_stage = [&](std::string_view stage) {
          if (generation != 2 || stage != c.stage) return;
          // steady_clock is CLOCK_MONOTONIC, one clock for every process.
          FILE* f = std::fopen(clock_file.c_str(), "w");
          std::fprintf(f, "%lld", static_cast<long long>(now_ns()));
          std::fclose(f);
          ::raise(SIGKILL);
        };
      }
      auto session =
          LiveSession::Open(*store, source, target, seat.bindings, lo);
      if (!session.ok()) return "open: " + session.status().ToString();
      for (generation = 1; generation <= 2; ++generation) {
        if (rank == 0) {
          internal::FillPattern(source, tensors, seat.buffers, nullptr,
                                generation);
        }
        auto u = (*session)->Update(generation);
        if (!u.ok()) {
          return std::to_string(now_ns()) + " " + u.status().ToString();
        }
      }
      return std::string("no failure");
    });
    std::ifstream in(clock_file);
    long long killed_at = 0;
    ASSERT_TRUE(in >> killed_at) << "the victim was not killed";
    for (uint32_t r = 0; r < 3; ++r) {
      if (r == c.victim) continue;
      SCOPED_TRACE("rank " + std::to_string(r) + ": " + out[r]);
      const size_t space = out[r].find(' ');
      ASSERT_NE(space, std::string::npos);
      const double seconds =
          (std::stoll(out[r].substr(0, space)) - killed_at) / 1e9;
      EXPECT_LT(seconds, 2.0);
      EXPECT_THAT(out[r], HasSubstr("rank " + std::to_string(c.victim)));
      std::printf("%s: rank %u failed %.3f s after the kill: %s\n",
                  c.name.c_str(), r, seconds, out[r].c_str() + space + 1);
    }
  }
}

// A rank that closes a standing session after fewer updates than the
// others is named by them within 2 s (like a dead one), not at the
// session timeout of a minute; its own Close reports the peer's failure.
TEST(StandingSessionTest, EarlyClosedRankIsNamedWithinTwoSeconds) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  const auto tensors = internal::TensorIndex(source);
  for (const NamedUcx& t : {Transports()[0], Transports()[2]}) {
    SCOPED_TRACE(t.name);
    TempDir dir;
    const auto out = TwoRanks([&](uint32_t rank) -> std::string {
      auto store = Must(OpenDirectoryRecordStore(dir.path()));
      Seat seat = SeatOf(source, target, rank, "early-" + std::to_string(rank));
      LiveSessionOptions lo;
      lo.session = "early";
      lo.rank = rank;
      lo.ranks = 2;
      lo.exchange_options = ToPeerExchangeOptions(t.ucx);
      lo.protocol = t.protocol;
      lo.timeout = std::chrono::seconds(60);
      auto session =
          LiveSession::Open(*store, source, target, seat.bindings, lo);
      if (!session.ok()) return "open: " + session.status().ToString();
      internal::FillPattern(source, tensors, seat.buffers, nullptr, 1);
      auto u1 = (*session)->Update(1);
      if (!u1.ok()) return "update 1: " + u1.status().ToString();
      if (rank == 1) return "close: " + (*session)->Close().ToString();
      const auto t0 = std::chrono::steady_clock::now();
      auto u2 = (*session)->Update(2);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      if (u2.ok()) return std::string("update 2 succeeded");
      return std::string(seconds < 2.0 ? "within 2 s: " : "too late: ") +
             u2.status().ToString();
    });
    const std::string named =
        "live session early, rank 0, update 2: live session early: rank 1 "
        "closed the session after 1 update";
    EXPECT_EQ(out[0], "within 2 s: Aborted: " + named);
    EXPECT_EQ(out[1],
              "close: Aborted: live session early aborted by rank 0: "
              "Aborted: " +
                  named);
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    ASSERT_OK_AND_ASSIGN(auto closed, internal::DecodeClosedRecord(
                                          Must(store->Get("early/closed/1")),
                                          "early/closed/1", 1));
    EXPECT_EQ(closed.updates, 1u);
    ASSERT_OK_AND_ASSIGN(
        auto abort, internal::DecodeAbort(Must(store->Get("early/abort/0")),
                                          "early/abort/0", 0));
    EXPECT_EQ(abort.generation, 2u);
    EXPECT_EQ(abort.reason, "Aborted: " + named);
  }
}

// A RecordStore whose first List under `prefix` shows only rank 0's
// record and returns after `delay`: a rank whose poll of a barrier saw
// the others missing and then lost the processor while they moved on.
class StaleFirstListStore : public RecordStore {
 public:
  StaleFirstListStore(RecordStore& base, std::string prefix,
                      std::chrono::milliseconds delay)
      : base_(base), prefix_(std::move(prefix)), delay_(delay) {}
  Status Put(std::string_view key, std::string_view value) override {
    return base_.Put(key, value);
  }
  Result<std::string> Get(std::string_view key) override {
    return base_.Get(key);
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    RESHARD_ASSIGN_OR_RETURN(auto keys, base_.List(prefix));
    if (stale_ || prefix != prefix_) return keys;
    stale_ = true;
    std::erase_if(keys,
                  [&](const std::string& k) { return k != prefix_ + "0"; });
    std::this_thread::sleep_for(delay_);
    return keys;
  }
  Status Delete(std::string_view key) override { return base_.Delete(key); }

 private:
  RecordStore& base_;
  const std::string prefix_;
  const std::chrono::milliseconds delay_;
  bool stale_ = false;
};

// Rank 1 closes right after opening while rank 0's last look at the
// "opened" barrier still missed rank 1: rank 1 passed that barrier, so
// its close is no early close, and both ranks open and close cleanly.
TEST(StandingSessionTest, CloseRightAfterOpenIsNoEarlyClose) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  TempDir dir;
  const auto out = TwoRanks([&](uint32_t rank) -> std::string {
    auto base = Must(OpenDirectoryRecordStore(dir.path()));
    StaleFirstListStore store(*base, rank == 0 ? "quick/opened/" : "none/",
                              std::chrono::milliseconds(300));
    Seat seat = SeatOf(source, target, rank, "quick-" + std::to_string(rank));
    LiveSessionOptions lo;
    lo.session = "quick";
    lo.rank = rank;
    lo.ranks = 2;
    lo.timeout = std::chrono::seconds(20);
    auto session = LiveSession::Open(store, source, target, seat.bindings, lo);
    if (!session.ok()) return "open: " + session.status().ToString();
    return "close: " + (*session)->Close().ToString();
  });
  EXPECT_EQ(out[0], "close: OK");
  EXPECT_EQ(out[1], "close: OK");
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  EXPECT_TRUE(Must(store->List("quick/")).empty());
}

}  // namespace
}  // namespace reshard
