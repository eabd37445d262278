// LiveDelta's source side against a target that answers the stale-region
// round with bytes no target writes (a flag other than 0 or 1, too few or
// too many bytes): the update fails naming the message and its peer, and
// nothing is sent again.

#include "live/live_delta.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/plan.h"
#include "reshard/sdk/peer_exchange.h"
#include "selftest/host_buffers.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::live_internal {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

using Kind = ExchangeOp::Kind;

constexpr uint32_t kBaseTag = 11;
constexpr uint32_t kDataTag = 12;

// Rank 0 holds every source of a dim0 -> dim1 reshard and sends each
// region to rank 1 as its own message; rank 1 is played by the test.
struct SourceRank {
  WeightPlacementManifest source = testing::CubeLayout(2, 0, {4, 8, 64});
  WeightPlacementManifest target = testing::CubeLayout(2, 1, {4, 8, 64});
  internal::HostBuffers src = Must(internal::AllocateHostBuffers(source, "s"));
  internal::HostBuffers dst = Must(internal::AllocateHostBuffers(target, "t"));
  LogicalTransferPlan plan = Must(LogicalTransferPlan::Make(source, target));
  BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
      plan, source, src.bindings, target, dst.bindings));
  std::unique_ptr<PeerExchange> zero = Must(MakePeerExchange("inproc", {0}));
  std::unique_ptr<PeerExchange> one = Must(MakePeerExchange("inproc", {1}));
  std::vector<ExchangeOp> sends;

  SourceRank() {
    EXPECT_OK(zero->Connect(1, Must(one->Address()), "rank 1"));
    EXPECT_OK(one->Connect(0, Must(zero->Address()), "rank 0"));
    for (const BoundRegion& br : bound.regions()) {
      sends.push_back({&br, {}, 1, Kind::kSend});
    }
  }

  static ExchangeRunOptions Round(uint32_t tag) {
    ExchangeRunOptions o;
    o.session_tag = tag;
    o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    return o;
  }

  // Rank 1's answer to the stale round: `flags` for every message (an
  // empty answer still names a buffer: none would send the region).
  void AnswerStaleRound(const std::vector<uint8_t>& flags) {
    std::vector<ExchangeOp> answer;
    answer_ = flags;
    answer_.push_back(0);
    for (const ExchangeOp& op : sends) {
      ExchangeOp x{op.region, {}, 0, Kind::kSend};
      x.buffer = answer_.data();
      x.buffer_bytes = flags.size();
      answer.push_back(std::move(x));
    }
    ExchangeStats stats;
    ASSERT_OK(one->Run(answer, Round(kBaseTag), &stats));
  }

 private:
  std::vector<uint8_t> answer_;
};

TEST(LiveDeltaTest, MalformedStaleFlagsFromATargetFailNamingTheMessage) {
  const struct {
    std::vector<uint8_t> flags;  // one region per message: one byte is right
    std::string message;
  } cases[] = {
      {{2}, "sending region 0 to rank 1: malformed stale-region flag 2"},
      {{0xFF}, "sending region 0 to rank 1: malformed stale-region flag 255"},
      {{},
       "sending region 0 to rank 1: the target sent 0 bytes of stale-region "
       "flags, expected 1"},
      // Longer than the flags of the message: refused on receipt.
      {{0, 0}, "receiving region 0 from rank 1: received 2 bytes, expected 1"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.message);
    SourceRank rank;
    ASSERT_GT(rank.sends.size(), 1u);
    LiveDelta delta(rank.plan, rank.source, /*threads=*/1);
    ASSERT_OK(delta.Snapshot(rank.sends));
    rank.AnswerStaleRound(c.flags);
    LiveReport report;
    ExchangeStats stats;
    const Status st =
        delta.Run(*rank.zero, rank.sends, SourceRank::Round(kBaseTag),
                  SourceRank::Round(kDataTag), 1, &report, &stats);
    EXPECT_THAT(st, StatusIs(StatusCode::kDataLoss, HasSubstr(c.message)));
    // The messages went out once (the unchanged sources as deltas), and no
    // region was counted as resent whole.
    EXPECT_EQ(stats.messages_sent, rank.sends.size());
    ASSERT_EQ(report.peers.size(), 1u);
    EXPECT_EQ(report.peers[0].full_regions_sent, 0u);
    EXPECT_EQ(report.peers[0].delta_regions_sent, rank.sends.size());
  }
}

}  // namespace
}  // namespace reshard::live_internal
