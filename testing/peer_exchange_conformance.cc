#include "testing/peer_exchange_conformance.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/plan.h"
#include "reshard/sdk/peer_exchange.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::testing {
namespace {

using Kind = ExchangeOp::Kind;
using ::reshard::internal::AllocateHostBuffers;
using ::reshard::internal::FillPattern;
using ::reshard::internal::HostBuffers;
using ::reshard::internal::TensorIndex;
using ::reshard::internal::VerifyPattern;
using ::testing::StartsWith;

// Rank 0 holds the sources, rank 1 the targets, of a dim0 -> dim1 reshard
// of 8 x 64 x 1024 bytes (strided regions on both sides).
struct Pair {
  explicit Pair(const std::string& exchange)
      : zero(Must(MakePeerExchange(exchange, {0, {}}))),
        one(Must(MakePeerExchange(exchange, {1, {}}))) {
    FillPattern(source, tensors, src);
    for (const auto& [id, p] : dst.data) {
      std::memset(p, 0xD7, target.FindFragment(id)->nbytes());
    }
  }

  ExchangeRunOptions Options(
      std::chrono::milliseconds within = std::chrono::seconds(30)) const {
    ExchangeRunOptions o;
    o.session_tag = 7;
    o.deadline = std::chrono::steady_clock::now() + within;
    return o;
  }

  // Every region as an op of `kind` with `peer`, each its own message.
  std::vector<ExchangeOp> Ops(Kind kind, uint32_t peer) const {
    std::vector<ExchangeOp> ops;
    for (const BoundRegion& br : bound.regions()) {
      ops.push_back({&br, {}, peer, kind});
    }
    return ops;
  }

  // Runs `zero_work` and `one_work` on a thread each, both ranks
  // connected and wired up first; returns their statuses.
  std::pair<Status, Status> OnTwoThreads(
      const std::function<Status(PeerExchange&)>& zero_work,
      const std::function<Status(PeerExchange&)>& one_work) {
    const std::string zero_address = Must(zero->Address());
    const std::string one_address = Must(one->Address());
    auto run = [&](PeerExchange& ex, uint32_t peer, const std::string& at,
                   const std::function<Status(PeerExchange&)>& work) {
      Status st = ex.Connect(peer, at, "rank " + std::to_string(peer));
      if (st.ok()) st = ex.Connect(peer, at, "again");  // a no-op
      if (st.ok())
        st = ex.WireUp(Options().deadline, [] { return Status::OK(); });
      return st.ok() ? work(ex) : st;
    };
    Status zero_status, one_status;
    std::thread t0(
        [&] { zero_status = run(*zero, 1, one_address, zero_work); });
    std::thread t1([&] { one_status = run(*one, 0, zero_address, one_work); });
    t0.join();
    t1.join();
    return {zero_status, one_status};
  }

  WeightPlacementManifest source = CubeLayout(2, 0, {8, 64, 1024});
  WeightPlacementManifest target = CubeLayout(2, 1, {8, 64, 1024});
  HostBuffers src = Must(AllocateHostBuffers(source, "source"));
  HostBuffers dst = Must(AllocateHostBuffers(target, "target"));
  LogicalTransferPlan plan = Must(LogicalTransferPlan::Make(source, target));
  BoundTransferPlan bound = Must(BoundTransferPlan::Bind(
      plan, source, src.bindings, target, dst.bindings));
  const std::unordered_map<std::string_view, uint64_t> tensors =
      TensorIndex(source);
  std::unique_ptr<PeerExchange> zero, one;
};

TEST_P(PeerExchangeConformance, PushedRegionsArriveByteForByte) {
  Pair p(GetParam());
  ASSERT_GT(p.bound.regions().size(), 1u);
  ExchangeStats sent, received;
  auto [zero, one] = p.OnTwoThreads(
      [&](PeerExchange& ex) {
        return ex.Run(p.Ops(Kind::kSend, 1), p.Options(), &sent);
      },
      [&](PeerExchange& ex) {
        return ex.Run(p.Ops(Kind::kReceive, 0), p.Options(), &received);
      });
  ASSERT_OK(zero);
  ASSERT_OK(one);
  EXPECT_EQ(VerifyPattern(p.target, p.tensors, p.dst), "");
  EXPECT_EQ(sent.messages_sent, p.plan.regions().size());
  EXPECT_EQ(sent.bytes_sent, p.plan.summary().bytes);
  EXPECT_EQ(received.messages_received, p.plan.regions().size());
  EXPECT_EQ(received.bytes_received, p.plan.summary().bytes);
  EXPECT_EQ(received.abandoned_in_flight, 0u);
}

TEST_P(PeerExchangeConformance, CoalescedRegionsTravelAsOneMessage) {
  Pair p(GetParam());
  ExchangeOp send{&p.bound.regions()[0], {}, 1, Kind::kSend};
  ExchangeOp receive{&p.bound.regions()[0], {}, 0, Kind::kReceive};
  for (size_t i = 1; i < p.bound.regions().size(); ++i) {
    send.more.push_back(&p.bound.regions()[i]);
    receive.more.push_back(&p.bound.regions()[i]);
  }
  ExchangeStats received;
  auto [zero, one] = p.OnTwoThreads(
      [&](PeerExchange& ex) { return ex.Run({send}, p.Options(), nullptr); },
      [&](PeerExchange& ex) {
        return ex.Run({receive}, p.Options(), &received);
      });
  ASSERT_OK(zero);
  ASSERT_OK(one);
  EXPECT_EQ(VerifyPattern(p.target, p.tensors, p.dst), "");
  EXPECT_EQ(received.messages_received, 1u);
  EXPECT_EQ(received.bytes_received, p.plan.summary().bytes);
  EXPECT_EQ(received.coalesced_regions, p.bound.regions().size());
}

// Rank 0 registers its sources and publishes the keys; rank 1 reads every
// region (strided ones row by row) while rank 0 progresses.
TEST_P(PeerExchangeConformance, RemoteReadsOfRegisteredMemory) {
  Pair p(GetParam());
  std::vector<std::string> keys;  // by region
  for (const BoundRegion& br : p.bound.regions()) {
    const std::string_view id =
        p.plan.source_fragments()[p.plan.regions()[br.region].source_fragment]
            .fragment_id;
    keys.push_back(Must(p.zero->RegisterMemory(
        p.src.data.at(id), p.source.FindFragment(id)->nbytes())));
  }
  std::atomic<bool> done{false};
  ExchangeStats stats;
  auto [zero, one] = p.OnTwoThreads(
      [&](PeerExchange& ex) {
        while (!done) ex.Progress(std::chrono::microseconds(200));
        return Status::OK();
      },
      [&](PeerExchange& ex) {
        std::vector<ExchangeOp> gets;
        for (const BoundRegion& br : p.bound.regions()) {
          auto key = ex.ImportRemoteKey(0, keys[gets.size()]);
          if (!key.ok()) {
            done = true;
            return key.status();
          }
          gets.push_back({&br, {}, 0, Kind::kGet, *key});
        }
        Status st = ex.Run(gets, p.Options(), &stats);
        done = true;
        return st;
      });
  ASSERT_OK(zero);
  ASSERT_OK(one);
  EXPECT_EQ(VerifyPattern(p.target, p.tensors, p.dst), "");
  EXPECT_GE(stats.gets, p.bound.regions().size());
}

// The sender's message holds one region, the receiver expects two.
TEST_P(PeerExchangeConformance, AShortMessageIsDataLossNamingTheOperation) {
  Pair p(GetParam());
  const ExchangeOp receive{
      &p.bound.regions()[0], {&p.bound.regions()[1]}, 0, Kind::kReceive};
  auto [zero, one] = p.OnTwoThreads(
      [&](PeerExchange& ex) {
        return ex.Run({{&p.bound.regions()[0], {}, 1, Kind::kSend}},
                      p.Options(), nullptr);
      },
      [&](PeerExchange& ex) {
        return ex.Run({receive}, p.Options(), nullptr);
      });
  ASSERT_OK(zero);
  EXPECT_THAT(
      one, StatusIs(StatusCode::kDataLoss,
                    "receiving region 0 (and 1 more coalesced into one "
                    "message) from rank 0: received " +
                        std::to_string(p.bound.regions()[0].bytes) +
                        " bytes, expected " + std::to_string(receive.bytes())));
}

// Nothing is sent: the deadline ends the receive, then an abort polled
// during the next one is returned as it is.
TEST_P(PeerExchangeConformance, DeadlineAndAbortEndARun) {
  Pair p(GetParam());
  Status late, aborted;
  auto [zero, one] = p.OnTwoThreads(
      [&](PeerExchange&) { return Status::OK(); },
      [&](PeerExchange& ex) {
        const std::vector<ExchangeOp> receive = {
            {&p.bound.regions()[1], {}, 0, Kind::kReceive}};
        late =
            ex.Run(receive, p.Options(std::chrono::milliseconds(50)), nullptr);
        ExchangeRunOptions o = p.Options();
        o.abort_poll_interval = std::chrono::milliseconds(0);
        o.poll_abort = [] { return Status::Aborted("rank 0 gave up"); };
        aborted = ex.Run(receive, o, nullptr);
        return Status::OK();
      });
  ASSERT_OK(zero);
  ASSERT_OK(one);
  EXPECT_EQ(late.code(), StatusCode::kUnavailable) << late.ToString();
  EXPECT_THAT(late.message(), StartsWith("timed out"));
  EXPECT_THAT(aborted, StatusIs(StatusCode::kAborted, "rank 0 gave up"));
}

TEST_P(PeerExchangeConformance,
       RegisteredUnderItsNameAndUnknownSettingsRefused) {
  const std::vector<std::string> names = RegisteredPeerExchanges();
  EXPECT_NE(std::find(names.begin(), names.end(), GetParam()), names.end());
  PeerExchangeConfig config;
  config.options.Set("no_such_setting", "1");
  auto made = MakePeerExchange(GetParam(), config);
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument)
      << made.status().ToString();
  EXPECT_THAT(made.status().message(), ::testing::HasSubstr("no_such_setting"));
}

}  // namespace
}  // namespace reshard::testing
