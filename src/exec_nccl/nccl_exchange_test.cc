// The NCCL exchange over the host emulation (api=host): the peer-exchange
// conformance suite (remote reads excepted: NCCL has none, and the suite
// checks that the exchange says so; a destroyed peer is not reported, as
// NCCL does not report one), its settings, the batches it posts per peer
// pair as recorded by the emulation, the reconnect it refuses, and a live
// session moving a strided layout between two threads byte for byte.

#include "exec_nccl/nccl_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec_cuda/host_device_api.h"
#include "exec_nccl/nccl_host_api.h"
#include "reshard/backends/fs_store.h"
#include "reshard/live.h"
#include "reshard/plan.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/live_seats.h"
#include "testing/must.h"
#include "testing/peer_exchange_conformance.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard::testing {

INSTANTIATE_TEST_SUITE_P(NcclHostEmulation, PeerExchangeConformance,
                         ::testing::Values(ExchangeUnderTest(
                             "nccl", PeerExchangeOptions().Set("api", "host"),
                             /*sees_dead_peers=*/false,
                             /*hands_pieces=*/false,
                             /*reads_remote=*/false)));

}  // namespace reshard::testing

namespace reshard::nccl {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using Kind = ExchangeOp::Kind;

PeerExchangeOptions Host() { return PeerExchangeOptions().Set("api", "host"); }

TEST(NcclExchangeTest, SettingsAreCheckedByName) {
  EXPECT_THAT(
      MakePeerExchange("nccl", {0, PeerExchangeOptions().Set("api", "gpu")}),
      StatusIs(StatusCode::kInvalidArgument,
               "peer exchange \"nccl\": setting \"api\" takes nccl or "
               "host, got \"gpu\""));
  EXPECT_THAT(
      MakePeerExchange("nccl", {0, PeerExchangeOptions().Set("device", "-1")}),
      StatusIs(StatusCode::kInvalidArgument,
               "peer exchange \"nccl\": setting \"device\" takes a "
               "CUDA device ordinal, got \"-1\""));
  EXPECT_THAT(
      MakePeerExchange("nccl", {0, PeerExchangeOptions().Set("tls", "tcp")}),
      StatusIs(StatusCode::kInvalidArgument,
               "peer exchange \"nccl\" has no setting \"tls\" (it "
               "takes api, device, m2n)"));
  EXPECT_THAT(
      MakePeerExchange("nccl", {0, PeerExchangeOptions().Set("m2n", "on")}),
      StatusIs(StatusCode::kInvalidArgument,
               "peer exchange \"nccl\": setting \"m2n\" takes auto or off, "
               "got \"on\""));
  const NcclExchangeSettings s = Must(ParseNcclSettings(
      PeerExchangeOptions().Set("api", "host").Set("device", "3")));
  EXPECT_TRUE(s.host_emulation);
  EXPECT_EQ(s.device, 3);
  EXPECT_TRUE(s.m2n);
  EXPECT_FALSE(
      Must(ParseNcclSettings(PeerExchangeOptions().Set("m2n", "off"))).m2n);
  if (!NcclLibraryBuilt()) {
    EXPECT_THAT(MakePeerExchange("nccl", {0, {}}),
                StatusIs(StatusCode::kUnimplemented,
                         "peer exchange \"nccl\": this build has no NCCL "
                         "(configure with RESHARD_CUDA ON where "
                         "cmake/nccl.cmake finds nccl.h and libnccl)"));
  }
}

// Rank 2's address carries one unique id for each lower rank.
TEST(NcclExchangeTest, AnAddressCarriesAUniqueIdPerLowerRank) {
  auto two = Must(MakePeerExchange("nccl", {2, Host()}));
  const std::string address = Must(two->Address());
  EXPECT_EQ(Must(two->Address()), address);
  ASSERT_TRUE(address.starts_with("nccl:")) << address;
  const size_t ids = address.rfind(":2:");
  ASSERT_NE(ids, std::string::npos) << address;
  // Two ids and a comma, and the mark of an exchange that offers M2N.
  EXPECT_EQ(address.size() - ids - 3, 2 * 256 + 1 + 4);
  EXPECT_TRUE(address.ends_with("/m2n")) << address;
  EXPECT_THAT(two->Connect(1, "nccl:5:0:", "rank 1"),
              StatusIs(StatusCode::kInvalidArgument,
                       "cannot connect to rank 1: the address is rank 0's, "
                       "this exchange is rank 2"));
  EXPECT_THAT(two->Connect(1, "ucx:abc", "rank 1"),
              StatusIs(StatusCode::kInvalidArgument,
                       "cannot connect to rank 1: malformed nccl address "
                       "\"ucx:abc\""));
  EXPECT_FALSE(two->capabilities().pull_on_one_host);
  EXPECT_EQ(two->capabilities().memory_kinds,
            std::vector<MemoryKind>{MemoryKind::kHost});
  auto device_side =
      MakeNcclExchange(0, std::make_shared<HostNcclApi>(),
                       MakeDeviceMemory(cuda::HostDeviceApi::Make({}), 0), 0);
  EXPECT_EQ(device_side->capabilities().memory_kinds,
            std::vector<MemoryKind>{MemoryKind::kCuda});
  EXPECT_THAT(
      two->RegisterMemory(nullptr, 1),
      StatusIs(StatusCode::kUnimplemented,
               "peer exchange \"nccl\" does not offer remote reads (kGet): "
               "it cannot register memory; a session over it pushes "
               "(protocol push or auto)"));
}

// Rank 0 holds the sources, rank 1 the targets (strided on both sides).
struct Pair {
  WeightPlacementManifest source = testing::CubeLayout(2, 0, {4, 16, 64});
  WeightPlacementManifest target = testing::CubeLayout(2, 1, {4, 16, 64});
  internal::HostBuffers src = Must(internal::AllocateHostBuffers(source, "s"));
  internal::HostBuffers dst = Must(internal::AllocateHostBuffers(target, "t"));
  LogicalTransferPlan plan = Must(LogicalTransferPlan::Make(source, target));
  BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
      plan, source, src.bindings, target, dst.bindings));
  std::shared_ptr<HostNcclApi> api0 = std::make_shared<HostNcclApi>();
  std::shared_ptr<HostNcclApi> api1 = std::make_shared<HostNcclApi>();
  std::unique_ptr<PeerExchange> zero =
      MakeNcclExchange(0, api0, MakeHostMemory(api0), 0);
  std::unique_ptr<PeerExchange> one =
      MakeNcclExchange(1, api1, MakeHostMemory(api1), 0);

  ExchangeRunOptions Options() const {
    ExchangeRunOptions o;
    o.session_tag = 3;
    o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    return o;
  }
};

// One region is three batches per rank: the message counts, their list,
// the messages; the sender packs its strided side; a kGet is refused
// naming the operation.
TEST(NcclExchangeTest, APairRunsThreeBatchesOfSendsAndReceives) {
  Pair p;
  const BoundRegion& r = p.bound.regions()[1];
  ASSERT_OK(p.zero->Connect(1, Must(p.one->Address()), "rank 1"));
  ASSERT_OK(p.one->Connect(0, Must(p.zero->Address()), "rank 0"));
  ASSERT_OK(p.zero->WireUp(p.Options().deadline, nullptr));
  ExchangeStats sent, received;
  Status zero;
  std::thread t([&] {
    zero = p.zero->Run({{&r, {}, 1, Kind::kSend}}, p.Options(), &sent);
  });
  ASSERT_OK(p.one->Run({{&r, {}, 0, Kind::kReceive}}, p.Options(), &received));
  t.join();
  ASSERT_OK(zero);
  // The source side is strided (packed), the target side contiguous
  // (received in place).
  EXPECT_EQ(sent.packed_messages, 1u);
  EXPECT_EQ(received.packed_messages, 0u);
  EXPECT_EQ(received.bytes_received, r.bytes);
  const std::string count = "count=" + std::to_string(r.bytes);
  std::vector<std::string> calls = p.api0->calls();
  calls.erase(calls.begin());  // the communicator's initialisation
  EXPECT_EQ(calls, (std::vector<std::string>{
                       "ncclGroupStart()",
                       "ncclSend(count=2, ncclUint64, peer=1)",
                       "ncclRecv(count=2, ncclUint64, peer=1)",
                       "ncclGroupEnd()",
                       "ncclGroupStart()",
                       "ncclSend(count=2, ncclUint64, peer=1)",
                       "ncclGroupEnd()",
                       "ncclGroupStart()",
                       "ncclSend(" + count + ", ncclUint8, peer=1)",
                       "ncclGroupEnd()",
                   }));
  EXPECT_EQ(p.api1->calls().back(), "ncclGroupEnd()");
  EXPECT_EQ(p.api1->calls()[p.api1->calls().size() - 2],
            "ncclRecv(" + count + ", ncclUint8, peer=0)");
  EXPECT_THAT(p.one->Run({{&r, {}, 0, Kind::kGet, 1}}, p.Options(), nullptr),
              StatusIs(StatusCode::kUnimplemented,
                       "reading region 1 from rank 0: the nccl exchange does "
                       "not offer remote reads (kGet)"));
}

// The pair's communicator is made from the higher rank's id for the lower
// one; a survivor that is the higher rank cannot reconnect to a restarted
// lower rank with it again.
TEST(NcclExchangeTest, AHigherRankCannotReuseItsIdForARestartedLowerRank) {
  Pair p;
  ASSERT_OK(p.one->Connect(0, Must(p.zero->Address()), "rank 0"));
  ASSERT_OK(p.one->Disconnect(0));
  auto restarted = MakeNcclExchange(0, p.api0, MakeHostMemory(p.api0), 0);
  EXPECT_THAT(p.one->Connect(0, Must(restarted->Address()), "rank 0"),
              StatusIs(StatusCode::kFailedPrecondition,
                       "cannot connect to rank 0 again: this rank's nccl "
                       "unique id for it was used by an earlier connection (a "
                       "restarted lower rank is reached only by a restarted "
                       "higher rank)"));
  EXPECT_EQ(p.one->connections_made(), 1u);
}

// Three ranks on threads, each sending a message to both others and
// receiving one from each in one Run: the pairs run on streams of their
// own, so no rank waits on a pair another rank has not reached yet.
TEST(NcclExchangeTest, ThreeRanksSwapMessagesInOneRunEach) {
  Pair p;  // its regions name the messages
  std::vector<std::unique_ptr<PeerExchange>> ex;
  for (uint32_t r = 0; r < 3; ++r) {
    ex.push_back(Must(MakePeerExchange("nccl", {r, Host()})));
  }
  std::vector<std::string> at;
  for (auto& e : ex) at.push_back(Must(e->Address()));
  // out[r][peer]: what r sends to peer; in[r][peer]: what r got from it.
  std::vector<std::vector<std::vector<uint8_t>>> out(3), in(3);
  std::vector<std::vector<uint64_t>> lengths(3, std::vector<uint64_t>(3));
  Status status[3];
  auto rank = [&](uint32_t r) {
    std::vector<ExchangeOp> ops;
    out[r].resize(3);
    in[r].resize(3);
    for (uint32_t peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      status[r] =
          ex[r]->Connect(peer, at[peer], "rank " + std::to_string(peer));
      if (!status[r].ok()) return;
      out[r][peer].assign(1000 + 10 * r + peer,
                          static_cast<uint8_t>(r * 3 + peer));
      in[r][peer].assign(2000, 0xD7);
      ExchangeOp send{&p.bound.regions()[r], {}, peer, Kind::kSend};
      send.buffer = out[r][peer].data();
      send.buffer_bytes = out[r][peer].size();
      ExchangeOp receive{&p.bound.regions()[peer], {}, peer, Kind::kReceive};
      receive.buffer = in[r][peer].data();
      receive.buffer_bytes = in[r][peer].size();
      receive.received = &lengths[r][peer];
      ops.push_back(send);
      ops.push_back(receive);
    }
    status[r] = ex[r]->WireUp(p.Options().deadline, nullptr);
    if (status[r].ok()) status[r] = ex[r]->Run(ops, p.Options(), nullptr);
  };
  std::thread t1([&] { rank(1); });
  std::thread t2([&] { rank(2); });
  rank(0);
  t1.join();
  t2.join();
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_OK(status[r]);
    for (uint32_t peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      const std::vector<uint8_t>& sent = out[peer][r];
      EXPECT_EQ(lengths[r][peer], sent.size()) << r << " from " << peer;
      EXPECT_TRUE(std::equal(sent.begin(), sent.end(), in[r][peer].begin()))
          << r << " from " << peer;
      EXPECT_EQ(in[r][peer][sent.size()], 0xD7) << r << " from " << peer;
    }
  }
}

// A receive the peer sent nothing for, and a message longer than the
// receive's buffer, are DataLoss naming the receive; the sender's run
// completes (its messages are received and dropped).
TEST(NcclExchangeTest, MissingAndOversizedMessagesAreDataLoss) {
  Pair p;
  ASSERT_OK(p.zero->Connect(1, Must(p.one->Address()), "rank 1"));
  ASSERT_OK(p.one->Connect(0, Must(p.zero->Address()), "rank 0"));
  const BoundRegion& r0 = p.bound.regions()[0];
  const BoundRegion& r1 = p.bound.regions()[1];
  auto run = [&](const std::vector<ExchangeOp>& sends,
                 const std::vector<ExchangeOp>& receives) {
    Status zero;
    std::thread t([&] { zero = p.zero->Run(sends, p.Options(), nullptr); });
    Status one = p.one->Run(receives, p.Options(), nullptr);
    t.join();
    EXPECT_OK(zero);
    return one;
  };
  EXPECT_THAT(run({{&r0, {}, 1, Kind::kSend}}, {{&r1, {}, 0, Kind::kReceive}}),
              StatusIs(StatusCode::kDataLoss,
                       "receiving region 1 from rank 0: the peer sent no such "
                       "message in this run"));
  std::vector<uint8_t> big(100, 7), small(50, 0);
  uint64_t length = 0;
  ExchangeOp send{&r0, {}, 1, Kind::kSend};
  send.buffer = big.data();
  send.buffer_bytes = big.size();
  ExchangeOp receive{&r0, {}, 0, Kind::kReceive};
  receive.buffer = small.data();
  receive.buffer_bytes = small.size();
  receive.received = &length;
  EXPECT_THAT(run({send}, {receive}),
              StatusIs(StatusCode::kDataLoss,
                       "receiving region 0 from rank 0: received 100 bytes, "
                       "expected at most 50"));
  EXPECT_EQ(small, std::vector<uint8_t>(50, 0));
  // The connection still works.
  receive.buffer_bytes = 0;
  small.assign(100, 0);
  receive.buffer = small.data();
  receive.buffer_bytes = small.size();
  EXPECT_OK(run({send}, {receive}));
  EXPECT_EQ(small, big);
  EXPECT_EQ(length, 100u);
}

// A live session of two ranks on threads, over the emulation: every
// target byte as the source pattern, every region verified.
TEST(NcclExchangeTest, ALiveSessionMovesALayoutBetweenThreads) {
  const auto source = testing::CubeLayout(2, 0, {8, 32, 256});
  const auto target = testing::CubeLayout(2, 1, {8, 32, 256});
  const auto tensors = internal::TensorIndex(source);
  const uint64_t regions =
      Must(LogicalTransferPlan::Make(source, target)).regions().size();
  testing::TempDir dir;
  std::string outcome[2];
  auto rank = [&](uint32_t r) {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    testing::Seat seat =
        testing::SeatOf(source, target, r, "nccl-" + std::to_string(r));
    if (r == 0) internal::FillPattern(source, tensors, seat.buffers);
    LiveSessionOptions o;
    o.session = "nccl";
    o.rank = r;
    o.ranks = 2;
    o.timeout = std::chrono::seconds(10);
    o.exchange = "nccl";
    o.exchange_options = Host();
    auto report = RunLiveReshard(*store, source, target, seat.bindings, o);
    if (!report.ok()) {
      outcome[r] = report.status().ToString();
      return;
    }
    outcome[r] = "ok " + std::to_string(report->verified_regions);
    if (r == 1) {
      outcome[r] +=
          " " + internal::VerifyPattern(target, tensors, seat.buffers);
    }
  };
  std::thread other([&] { rank(1); });
  rank(0);
  other.join();
  EXPECT_EQ(outcome[0], "ok 0");
  EXPECT_EQ(outcome[1], "ok " + std::to_string(regions) + " ");
}

}  // namespace
}  // namespace reshard::nccl
