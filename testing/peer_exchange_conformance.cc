#include "testing/peer_exchange_conformance.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "bind/strided_stream.h"
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
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Rank 0 holds the sources, rank 1 the targets, of a dim0 -> dim1 reshard
// of 8 x 64 x 1024 bytes (strided regions on both sides).
struct Pair {
  explicit Pair(const ExchangeUnderTest& exchange)
      : zero(Must(MakePeerExchange(exchange.name, {0, exchange.options}))),
        one(Must(MakePeerExchange(exchange.name, {1, exchange.options}))) {
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
  // Every operation is reported complete once, on each side.
  std::vector<int> sends_done(p.bound.regions().size(), 0);
  std::vector<int> receives_done(p.bound.regions().size(), 0);
  auto [zero, one] = p.OnTwoThreads(
      [&](PeerExchange& ex) {
        ExchangeRunOptions o = p.Options();
        o.on_completion = [&](size_t i) { ++sends_done.at(i); };
        return ex.Run(p.Ops(Kind::kSend, 1), o, &sent);
      },
      [&](PeerExchange& ex) {
        ExchangeRunOptions o = p.Options();
        o.on_completion = [&](size_t i) { ++receives_done.at(i); };
        return ex.Run(p.Ops(Kind::kReceive, 0), o, &received);
      });
  ASSERT_OK(zero);
  ASSERT_OK(one);
  EXPECT_EQ(sends_done, std::vector<int>(p.bound.regions().size(), 1));
  EXPECT_EQ(receives_done, std::vector<int>(p.bound.regions().size(), 1));
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

// Pieces (on_piece), where an exchange hands them, are the operation's
// stream: the source bytes a send packed, the bytes a receive unpacked
// into its targets; every byte once, each in stream order on its own.
TEST_P(PeerExchangeConformance, PiecesAreTheStreamsThatMoved) {
  Pair p(GetParam());
  const size_t n = p.bound.regions().size();
  struct Seen {
    std::vector<uint8_t> bytes;
    uint64_t next = 0, pieces = 0;
    bool in_order = true;
  };
  std::vector<Seen> sent(n), received(n);
  auto collect = [&](std::vector<Seen>& seen) {
    return [&seen, &p](size_t i, uint64_t offset, const uint8_t* bytes,
                       uint64_t length) {
      Seen& s = seen.at(i);
      s.bytes.resize(p.bound.regions()[i].bytes);
      ASSERT_LE(offset + length, s.bytes.size());
      std::memcpy(s.bytes.data() + offset, bytes, length);
      s.in_order = s.in_order && offset == s.next;
      s.next = offset + length;
      ++s.pieces;
    };
  };
  auto [zero, one] = p.OnTwoThreads(
      [&](PeerExchange& ex) {
        ExchangeRunOptions o = p.Options();
        o.on_piece = collect(sent);
        return ex.Run(p.Ops(Kind::kSend, 1), o, nullptr);
      },
      [&](PeerExchange& ex) {
        ExchangeRunOptions o = p.Options();
        o.on_piece = collect(received);
        return ex.Run(p.Ops(Kind::kReceive, 0), o, nullptr);
      });
  ASSERT_OK(zero);
  ASSERT_OK(one);
  ASSERT_EQ(VerifyPattern(p.target, p.tensors, p.dst), "");
  uint64_t pieces = 0;
  for (size_t i = 0; i < n; ++i) {
    const BoundRegion& br = p.bound.regions()[i];
    std::vector<uint8_t> stream(br.bytes);
    const auto source = ::reshard::internal::StridedSide::Source(br);
    ::reshard::internal::PackStream(source, 0, stream.data(), br.bytes);
    for (const Seen* s : {&sent[i], &received[i]}) {
      pieces += s->pieces;
      if (s->pieces == 0) continue;
      EXPECT_TRUE(s->in_order) << "region " << i;
      EXPECT_EQ(s->next, br.bytes) << "region " << i;
      EXPECT_TRUE(s->bytes == stream) << "region " << i;
    }
  }
  EXPECT_EQ(pieces > 0, GetParam().hands_pieces);
}

// Rank 0 registers its sources and publishes the keys; rank 1 reads every
// region (strided ones row by row) while rank 0 progresses.
TEST_P(PeerExchangeConformance, RemoteReadsOfRegisteredMemory) {
  Pair p(GetParam());
  if (!GetParam().reads_remote) {
    const auto key = p.zero->RegisterMemory(p.src.data.begin()->second, 1);
    EXPECT_EQ(key.status().code(), StatusCode::kUnimplemented)
        << key.status().ToString();
    EXPECT_THAT(key.status().message(), HasSubstr(GetParam().name));
    EXPECT_FALSE(p.zero->capabilities().pull_on_one_host);
    return;
  }
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

// Bytes derived from their index, different for each `seed`.
std::vector<uint8_t> IndexBytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = static_cast<uint8_t>((i * 7 + i / 251 + seed) & 0xFF);
  }
  return v;
}

constexpr size_t kMessageBytes = 100000;

// Rank 0 (p.zero) and rank 1 (`one`) connect where not yet connected,
// wire up and swap one message each way, tagged `session_tag`: rank r
// sends IndexBytes(kMessageBytes, seed + r) named by region r, and each
// message must arrive byte for byte.
void SwapMessages(Pair& p, PeerExchange& one, uint32_t session_tag,
                  uint8_t seed) {
  const std::string zero_address = Must(p.zero->Address());
  const std::string one_address = Must(one.Address());
  std::vector<uint8_t> sent[2], received[2];
  uint64_t lengths[2] = {0, 0};
  auto rank = [&](PeerExchange& ex, uint32_t r,
                  const std::string& at) -> Status {
    const uint32_t peer = 1 - r;
    sent[r] = IndexBytes(kMessageBytes, static_cast<uint8_t>(seed + r));
    received[r].assign(kMessageBytes, 0xD7);
    ExchangeOp send{&p.bound.regions()[r], {}, peer, Kind::kSend};
    send.buffer = sent[r].data();
    send.buffer_bytes = sent[r].size();
    ExchangeOp receive{&p.bound.regions()[peer], {}, peer, Kind::kReceive};
    receive.buffer = received[r].data();
    receive.buffer_bytes = received[r].size();
    receive.received = &lengths[r];
    ExchangeRunOptions options = p.Options();
    options.session_tag = session_tag;
    RESHARD_RETURN_NOT_OK(ex.Connect(peer, at, "rank " + std::to_string(peer)));
    RESHARD_RETURN_NOT_OK(
        ex.WireUp(options.deadline, [] { return Status::OK(); }));
    return ex.Run({send, receive}, options, nullptr);
  };
  Status zero_status, one_status;
  std::thread t0([&] { zero_status = rank(*p.zero, 0, one_address); });
  std::thread t1([&] { one_status = rank(one, 1, zero_address); });
  t0.join();
  t1.join();
  ASSERT_OK(zero_status);
  ASSERT_OK(one_status);
  EXPECT_EQ(lengths[0], kMessageBytes);
  EXPECT_EQ(lengths[1], kMessageBytes);
  EXPECT_TRUE(received[0] == sent[1]) << "rank 0 received other bytes";
  EXPECT_TRUE(received[1] == sent[0]) << "rank 1 received other bytes";
}

// Rank 1 dies (its exchange destroyed) and a new rank-1 exchange starts
// at a new address; rank 0 forgets the old connection and makes one to
// the new address, over the same exchange.
TEST_P(PeerExchangeConformance,
       APeerReplacedAtANewAddressIsReachedAfterDisconnectAndConnect) {
  Pair p(GetParam());
  EXPECT_EQ(p.zero->connections_made(), 0u);
  const std::string first_address = Must(p.one->Address());
  ASSERT_NO_FATAL_FAILURE(SwapMessages(p, *p.one, 7, 1));
  EXPECT_EQ(p.zero->connections_made(), 1u);
  p.one.reset();
  std::unique_ptr<PeerExchange> restarted =
      Must(MakePeerExchange(GetParam().name, {1, GetParam().options}));
  EXPECT_NE(Must(restarted->Address()), first_address);
  ASSERT_OK(p.zero->Disconnect(1));
  ASSERT_NO_FATAL_FAILURE(SwapMessages(p, *restarted, 8, 101));
  EXPECT_OK(p.zero->PeerFailure());
  EXPECT_OK(restarted->PeerFailure());
  EXPECT_EQ(p.zero->connections_made(), 2u);
  EXPECT_EQ(restarted->connections_made(), 1u);
}

// Disconnecting a peer never connected does nothing; connecting to a peer
// already connected makes no new connection; a disconnected peer's keys
// cannot be imported until it is connected again.
TEST_P(PeerExchangeConformance,
       DisconnectOfANeverConnectedPeerIsOkAndConnectingAgainCountsOnce) {
  Pair p(GetParam());
  EXPECT_OK(p.zero->Disconnect(1));
  EXPECT_OK(p.zero->Disconnect(5));
  EXPECT_EQ(p.zero->connections_made(), 0u);
  const std::string key =
      GetParam().reads_remote
          ? Must(p.one->RegisterMemory(
                p.src.data.begin()->second,
                p.source.FindFragment(p.src.data.begin()->first)->nbytes()))
          : "";
  const std::string at = Must(p.one->Address());
  ASSERT_OK(p.zero->Connect(1, at, "rank 1"));
  ASSERT_OK(p.zero->Connect(1, at, "again"));
  EXPECT_EQ(p.zero->connections_made(), 1u);
  ASSERT_OK(p.zero->Disconnect(1));
  EXPECT_OK(p.zero->Disconnect(1));
  EXPECT_OK(p.zero->PeerFailure());
  EXPECT_EQ(p.zero->connections_made(), 1u);
  EXPECT_THAT(
      p.zero->ImportRemoteKey(1, key),
      StatusIs(StatusCode::kInternal, "remote key of unconnected rank 1"));
}

// Rank 1's exchange is destroyed with no close agreed with rank 0 first:
// rank 0, progressing, sees the peer lost (when the exchange can see it),
// until it disconnects the peer.
TEST_P(PeerExchangeConformance,
       ADeadPeerIsNamedByPeerFailureUntilDisconnected) {
  Pair p(GetParam());
  ASSERT_NO_FATAL_FAILURE(SwapMessages(p, *p.one, 7, 1));
  p.one.reset();
  const auto until = std::chrono::steady_clock::now() +
                     (GetParam().sees_dead_peers ? std::chrono::seconds(20)
                                                 : std::chrono::seconds(1));
  Status failure;
  while ((failure = p.zero->PeerFailure()).ok() &&
         std::chrono::steady_clock::now() < until) {
    p.zero->Progress(std::chrono::milliseconds(1));
  }
  if (GetParam().sees_dead_peers) {
    EXPECT_EQ(failure.code(), StatusCode::kUnavailable) << failure.ToString();
    EXPECT_THAT(failure.message(), HasSubstr("rank 1"));
  } else {
    EXPECT_OK(failure);
  }
  ASSERT_OK(p.zero->Disconnect(1));
  EXPECT_OK(p.zero->PeerFailure());
  EXPECT_EQ(p.zero->connections_made(), 1u);
}

TEST_P(PeerExchangeConformance,
       RegisteredUnderItsNameAndUnknownSettingsRefused) {
  const std::vector<std::string> names = RegisteredPeerExchanges();
  EXPECT_NE(std::find(names.begin(), names.end(), GetParam().name),
            names.end());
  PeerExchangeConfig config;
  config.options.Set("no_such_setting", "1");
  auto made = MakePeerExchange(GetParam().name, config);
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument)
      << made.status().ToString();
  EXPECT_THAT(made.status().message(), ::testing::HasSubstr("no_such_setting"));
}

}  // namespace

void PrintTo(const ExchangeUnderTest& exchange, std::ostream* os) {
  *os << exchange.name;
  for (const auto& [name, value] : exchange.options.settings) {
    *os << " " << name << "=" << value;
  }
}

}  // namespace reshard::testing
