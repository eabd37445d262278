// The in-process exchange on its own: with two ranks' exchanges in one
// thread, a message of the wrong size, an abandoned peer, an unknown
// address, a malformed key and the deadline fail naming what went wrong
// in its own words; a destroyed peer's leftovers go when it is
// disconnected; its registration. The transfers themselves (pushed,
// coalesced, read, byte for byte) are the conformance suite's, run below.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/plan.h"
#include "reshard/sdk/peer_exchange.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/must.h"
#include "testing/peer_exchange_conformance.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

// The registry's names as an error lists them. Other tests of this binary
// register exchanges of their own in the same process (a whole-binary run
// sees them): those names are known and left out of BuiltIns().
std::string RegisteredList() {
  std::string out;
  for (const std::string& name : RegisteredPeerExchanges()) {
    out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

std::vector<std::string> BuiltIns() {
  std::vector<std::string> out;
  for (const std::string& name : RegisteredPeerExchanges()) {
    if (name != "cuda-ipc-emulated" && name != "cuda-ipc-direct" &&
        name != "nccl-device") {
      out.push_back(name);
    }
  }
  return out;
}

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

using Kind = ExchangeOp::Kind;

// Rank 0 holds the sources, rank 1 the targets, of a dim0 -> dim1 reshard.
struct Pair {
  WeightPlacementManifest source = testing::CubeLayout(2, 0, {8, 64, 1024});
  WeightPlacementManifest target = testing::CubeLayout(2, 1, {8, 64, 1024});
  HostBuffers src = Must(AllocateHostBuffers(source, "source"));
  HostBuffers dst = Must(AllocateHostBuffers(target, "target"));
  LogicalTransferPlan plan = Must(LogicalTransferPlan::Make(source, target));
  BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
      plan, source, src.bindings, target, dst.bindings));
  std::unique_ptr<PeerExchange> zero =
      Must(MakePeerExchange("inproc", {0, {}}));
  std::unique_ptr<PeerExchange> one = Must(MakePeerExchange("inproc", {1, {}}));
  const std::unordered_map<std::string_view, uint64_t> tensors =
      TensorIndex(source);

  Pair() {
    FillPattern(source, tensors, src);
    for (const auto& [id, p] : dst.data) {
      std::memset(p, 0xD7, target.FindFragment(id)->nbytes());
    }
    EXPECT_OK(zero->Connect(1, Must(one->Address()), "rank 1"));
    EXPECT_OK(one->Connect(0, Must(zero->Address()), "rank 0"));
  }

  ExchangeRunOptions Options() const {
    ExchangeRunOptions o;
    o.session_tag = 7;
    o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    return o;
  }
};

TEST(InprocExchangeTest, FailuresNameTheRegionAndThePeer) {
  Pair p;
  // The sender lists one region, the receiver two: the sizes differ.
  ExchangeOp receive{
      &p.bound.regions()[0], {&p.bound.regions()[1]}, 0, Kind::kReceive};
  ASSERT_OK(p.zero->Run({{&p.bound.regions()[0], {}, 1, Kind::kSend}},
                        p.Options(), nullptr));
  EXPECT_THAT(
      p.one->Run({receive}, p.Options(), nullptr),
      StatusIs(StatusCode::kDataLoss,
               "receiving region 0 (and 1 more coalesced into one "
               "message) from rank 0: received " +
                   std::to_string(p.bound.regions()[0].bytes) +
                   " bytes, expected " + std::to_string(receive.bytes())));
  // Nothing arrives before the deadline.
  ExchangeRunOptions soon = p.Options();
  soon.deadline = std::chrono::steady_clock::now();
  EXPECT_THAT(p.one->Run({{&p.bound.regions()[1], {}, 0, Kind::kReceive}}, soon,
                         nullptr),
              StatusIs(StatusCode::kUnavailable,
                       "timed out receiving region 1 from rank 0"));
  // A peer that abandoned its exchange is lost.
  p.zero->Abandon();
  EXPECT_THAT(p.one->PeerFailure(),
              StatusIs(StatusCode::kUnavailable,
                       "rank 0 was lost (its exchange was abandoned or "
                       "destroyed)"));
  EXPECT_THAT(p.one->Run({{&p.bound.regions()[1], {}, 0, Kind::kReceive}},
                         p.Options(), nullptr),
              StatusIs(StatusCode::kUnavailable,
                       "receiving region 1 from rank 0: the peer was lost"));
  // An address of no exchange, a malformed key, an unknown implementation.
  EXPECT_THAT(p.one->Connect(2, "inproc:999999", "rank 2"),
              StatusIs(StatusCode::kUnavailable,
                       "cannot connect to rank 2: no in-process exchange at "
                       "address \"inproc:999999\" in this process"));
  EXPECT_THAT(p.one->ImportRemoteKey(0, "12:x"),
              StatusIs(StatusCode::kInvalidArgument,
                       "malformed in-process remote key \"12:x\" of rank 0"));
  EXPECT_THAT(MakePeerExchange("nixl", {}),
              StatusIs(StatusCode::kInvalidArgument,
                       "unknown peer exchange \"nixl\" (registered: " +
                           RegisteredList() + ")"));
  EXPECT_THAT(BuiltIns(),
              ::testing::ElementsAre("cuda-ipc", "inproc", "nccl", "ucx"));
}

// A destroyed exchange is lost to its peers. Disconnecting it drops what it
// left behind: its message waiting in this rank's mailbox and the key
// imported for it, but not what the new exchange for its rank sent
// already; that one is reached afresh.
TEST(InprocExchangeTest, DisconnectDropsTheLostPeersMessagesAndKeys) {
  Pair p;
  const BoundRegion& first = p.bound.regions()[0];
  const std::string_view id =
      p.plan.source_fragments()[p.plan.regions()[first.region].source_fragment]
          .fragment_id;
  const uint64_t key = Must(p.one->ImportRemoteKey(
      0, Must(p.zero->RegisterMemory(p.src.data.at(id),
                                     p.source.FindFragment(id)->nbytes()))));
  ASSERT_OK(p.zero->Run({{&first, {}, 1, Kind::kSend}}, p.Options(), nullptr));
  p.zero.reset();
  EXPECT_THAT(p.one->PeerFailure(),
              StatusIs(StatusCode::kUnavailable,
                       "rank 0 was lost (its exchange was abandoned or "
                       "destroyed)"));
  // The restarted rank 0 sends region 1 before rank 1 disconnects the old
  // one: that message stays, the old one's (region 0) goes.
  std::unique_ptr<PeerExchange> restarted =
      Must(MakePeerExchange("inproc", {0, {}}));
  ASSERT_OK(restarted->Connect(1, Must(p.one->Address()), "rank 1"));
  const BoundRegion& second = p.bound.regions()[1];
  ASSERT_OK(
      restarted->Run({{&second, {}, 1, Kind::kSend}}, p.Options(), nullptr));
  ASSERT_OK(p.one->Disconnect(0));
  EXPECT_OK(p.one->PeerFailure());
  ASSERT_OK(p.one->Connect(0, Must(restarted->Address()), "rank 0"));
  ASSERT_OK(
      p.one->Run({{&second, {}, 0, Kind::kReceive}}, p.Options(), nullptr));
  ExchangeRunOptions soon = p.Options();
  soon.deadline = std::chrono::steady_clock::now();
  EXPECT_THAT(p.one->Run({{&first, {}, 0, Kind::kReceive}}, soon, nullptr),
              StatusIs(StatusCode::kUnavailable,
                       "timed out receiving region 0 from rank 0"));
  EXPECT_THAT(
      p.one->Run({{&first, {}, 0, Kind::kGet, key}}, p.Options(), nullptr),
      StatusIs(StatusCode::kInvalidArgument,
               "reading region 0 from rank 0: no key of the peer "
               "covers its source"));
  ASSERT_OK(
      restarted->Run({{&first, {}, 1, Kind::kSend}}, p.Options(), nullptr));
  EXPECT_OK(
      p.one->Run({{&first, {}, 0, Kind::kReceive}}, p.Options(), nullptr));
  EXPECT_EQ(p.one->connections_made(), 2u);
}

// The registry refuses a second "inproc" and keeps the first; settings
// the in-process exchange does not take are refused.
TEST(InprocExchangeTest, RegistryRefusesADuplicateNameAndUnknownSettings) {
  const Status again =
      RegisterPeerExchange({"inproc", "another", [](const PeerExchangeConfig&) {
                              return Result<std::unique_ptr<PeerExchange>>(
                                  Status::Internal("must not be called"));
                            }});
  EXPECT_THAT(again, StatusIs(StatusCode::kAlreadyExists,
                              "peer exchange \"inproc\" is already "
                              "registered"));
  EXPECT_EQ(Must(FindPeerExchange("inproc"))->description,
            "ranks as threads of one process (tests of the session without "
            "a network)");
  EXPECT_OK(MakePeerExchange("inproc", {0, {}}).status());
  EXPECT_THAT(RegisterPeerExchange({"", "nameless", nullptr}),
              StatusIs(StatusCode::kInvalidArgument,
                       "peer exchange \"\": a registration needs a factory"));
  PeerExchangeConfig config;
  config.options.Set("tls", "tcp");
  EXPECT_THAT(MakePeerExchange("inproc", config),
              StatusIs(StatusCode::kInvalidArgument,
                       "peer exchange \"inproc\" has no setting \"tls\" "
                       "(it takes none)"));
  EXPECT_THAT(BuiltIns(),
              ::testing::ElementsAre("cuda-ipc", "inproc", "nccl", "ucx"));
}

using ::reshard::testing::PeerExchangeConformance;
INSTANTIATE_TEST_SUITE_P(Inproc, PeerExchangeConformance,
                         ::testing::Values("inproc"));

}  // namespace
}  // namespace reshard::internal
