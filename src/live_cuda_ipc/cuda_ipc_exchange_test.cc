// The "cuda-ipc" exchange over the host emulation's CUDA IPC (real shared
// memory between processes): one process registers emulated device
// memory, another imports its keys and reads regions, contiguous and
// strided, byte for byte into its own emulated device memory; handles are
// opened once per allocation and closed at Disconnect and destruction;
// keys that are not keys, or whose allocation is gone, are refused naming
// the peer. Then live sessions between two processes over it.
//
// The conformance suite (testing/peer_exchange_conformance.h) does not
// apply: it runs both ranks as threads of one process, whose handles CUDA
// IPC cannot open (a process cannot open what it exported), and most of
// it pushes messages, which this exchange does not send.
#include "live_cuda_ipc/cuda_ipc_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec_cuda/host_device_api.h"
#include "reshard/live.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/children.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::InChild;
using ::reshard::testing::Must;
using ::reshard::testing::MustOk;
using Kind = ExchangeOp::Kind;

constexpr size_t kBytes = 4096;

uint8_t Pattern(size_t i) { return static_cast<uint8_t>(i * 13 + 5); }

std::shared_ptr<cuda::HostDeviceApi> Emulated() {
  return cuda::HostDeviceApi::Make({.devices = 1, .ipc_shareable = true});
}

std::unique_ptr<PeerExchange> Exchange(std::shared_ptr<cuda::DeviceApi> api,
                                       uint32_t rank) {
  return Must(MakeCudaIpcExchangeOver(std::move(api), {rank, {}}));
}

ExchangeRunOptions Within30s() {
  ExchangeRunOptions o;
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  return o;
}

// The lines of `api`'s log about IPC handles, joined.
std::string IpcCalls(const cuda::HostDeviceApi& api) {
  std::string out;
  for (const std::string& line : api.calls()) {
    if (line.rfind("Ipc", 0) == 0) out += (out.empty() ? "" : " | ") + line;
  }
  return out;
}

// Rank 0 (this process): one emulated allocation of the pattern, its
// middle registered.
struct Exporter {
  std::shared_ptr<cuda::HostDeviceApi> api = Emulated();
  uint8_t* memory = static_cast<uint8_t*>(Must(api->Malloc(0, kBytes)));
  std::unique_ptr<PeerExchange> exchange = Exchange(api, 0);
  std::string key;

  Exporter() {
    for (size_t i = 0; i < kBytes; ++i) memory[i] = Pattern(i);
    key = Must(exchange->RegisterMemory(memory + 256, 3072));
  }
  ~Exporter() { MustOk(api->Free(memory)); }
  uint64_t At(size_t offset) const {
    return reinterpret_cast<uint64_t>(memory) + offset;
  }
};

TEST(CudaIpcExchangeTest, ReadsContiguousAndStridedRegionsOfAnotherProcess) {
  Exporter zero;
  const std::string address = Must(zero.exchange->Address());
  EXPECT_THAT(address,
              ::testing::MatchesRegex("cuda-ipc:" + std::to_string(::getpid()) +
                                      ":reshard-cuda-ipc-" +
                                      std::to_string(::getpid()) + "-[0-9]+"));
  EXPECT_EQ(zero.key.size(), 96u);
  const std::string out = InChild([&] {
    auto api = Emulated();
    auto* dst = static_cast<uint8_t*>(Must(api->Malloc(0, 1024)));
    std::memset(dst, 0xEE, 1024);
    auto one = Exchange(api, 1);
    MustOk(one->Connect(0, address, "rank 0 (host a)"));
    const uint64_t key = Must(one->ImportRemoteKey(0, zero.key));
    const uint64_t again = Must(one->ImportRemoteKey(0, zero.key));
    const auto at = [&](size_t o) {
      return reinterpret_cast<uint64_t>(dst) + o;
    };
    // 100 contiguous bytes; 8 rows of 16 bytes 64 apart into rows 16
    // apart; 3 bytes.
    std::vector<BoundRegion> regions = {
        {zero.At(300), at(0), 100, {}, 100, 0},
        {zero.At(1000), at(200), 16, {{8, 64, 16}}, 128, 1},
        {zero.At(3325), at(400), 3, {}, 3, 2}};
    std::vector<ExchangeOp> ops;
    for (const BoundRegion& r : regions) {
      ops.push_back({&r, {}, 0, Kind::kGet, r.region == 1 ? again : key});
    }
    std::string done;
    ExchangeRunOptions o = Within30s();
    o.on_completion = [&](size_t i) { done += std::to_string(i); };
    ExchangeStats stats;
    MustOk(one->Run(ops, o, &stats));
    std::string r = "completed " + done + " gets " +
                    std::to_string(stats.gets) + " bytes " +
                    std::to_string(stats.bytes_received);
    bool exact = true;
    for (size_t i = 0; i < 1024; ++i) {
      uint8_t want = 0xEE;
      if (i < 100) want = Pattern(300 + i);
      if (i >= 200 && i < 328) {
        want = Pattern(1000 + (i - 200) / 16 * 64 + (i - 200) % 16);
      }
      if (i >= 400 && i < 403) want = Pattern(3325 + i - 400);
      exact = exact && dst[i] == want;
    }
    r += exact ? " exact" : " WRONG";
    MustOk(one->Disconnect(0));
    r += " | " + IpcCalls(*api);
    r += " | " + one->Run({ops[0]}, o, nullptr).ToString();
    MustOk(api->Free(dst));
    return r;
  });
  EXPECT_EQ(out,
            "completed 012 gets 3 bytes 231 exact | IpcOpenMemHandle device=0 "
            "bytes=4096 -> refs=1 | IpcCloseMemHandle bytes=4096 -> refs=0 | "
            "Internal: exchange operation names unconnected rank 0");
}

// What the peer does not accept: a key that is not a cuda-ipc key, a key
// whose allocation was freed since, a peer in this process, a message.
TEST(CudaIpcExchangeTest, RefusesGarbageAndStaleKeysNamingThePeer) {
  Exporter zero;
  std::string stale;
  {
    void* gone = Must(zero.api->Malloc(0, 512));
    stale = Must(zero.exchange->RegisterMemory(gone, 512));
    MustOk(zero.api->Free(gone));
  }
  const std::string address = Must(zero.exchange->Address());
  EXPECT_THAT(zero.exchange->Connect(1, address, "rank 1"),
              testing::StatusIs(
                  StatusCode::kFailedPrecondition,
                  "cannot connect to rank 1: it runs in this process (" +
                      std::to_string(::getpid()) +
                      "), and CUDA IPC connects processes (a process cannot "
                      "open the handles it exported)"));
  const std::string out = InChild([&] {
    auto api = Emulated();
    auto one = Exchange(api, 1);
    MustOk(one->Connect(0, address, "rank 0 (host a)"));
    std::string garbage = zero.key;
    garbage[3] ^= 1;
    std::string r = one->ImportRemoteKey(0, garbage).status().ToString();
    r += "\n" + one->ImportRemoteKey(0, "short").status().ToString();
    r += "\n" + one->ImportRemoteKey(0, stale).status().ToString();
    const uint64_t key = Must(one->ImportRemoteKey(0, zero.key));
    BoundRegion region{zero.At(256), zero.At(0), 8, {}, 8, 4};
    r += "\n" + one->Run({{&region, {}, 0, Kind::kSend}}, Within30s(), nullptr)
                    .ToString();
    BoundRegion outside{zero.At(3300), zero.At(0), 64, {}, 64, 5};
    r += "\n" +
         one->Run({{&outside, {}, 0, Kind::kGet, key}}, Within30s(), nullptr)
             .ToString();
    one.reset();  // closes what it opened
    return r + "\n" + IpcCalls(*api);
  });
  std::vector<std::string> lines;
  for (size_t at = 0, end = 0; at <= out.size(); at = end + 1) {
    end = std::min(out.find('\n', at), out.size());
    lines.push_back(out.substr(at, end - at));
  }
  ASSERT_EQ(lines.size(), 6u) << out;
  EXPECT_EQ(lines[0],
            "InvalidArgument: remote key of rank 0 (host a) is not a cuda-ipc "
            "key (96 bytes; a key is 96 starting \"cudaipc1\")");
  EXPECT_EQ(lines[1],
            "InvalidArgument: remote key of rank 0 (host a) is not a cuda-ipc "
            "key (5 bytes; a key is 96 starting \"cudaipc1\")");
  const std::string pid = std::to_string(::getpid());
  EXPECT_THAT(lines[2],
              ::testing::MatchesRegex(
                  "InvalidArgument: opening the remote key of rank 0 \\(host "
                  "a\\): cudaErrorInvalidResourceHandle: IpcOpenMemHandle: "
                  "the allocation of process " +
                  pid + " that the handle names \\(reshard-emulated-" + pid +
                  "-[0-9]+\\) is no longer exported \\(freed, or its "
                  "process exited\\)"));
  EXPECT_EQ(lines[3],
            "Unimplemented: sending region 4 to rank 0 (host a): peer "
            "exchange \"cuda-ipc\" reads every region and sends none in "
            "messages (a session over it pulls: protocol auto or pull, no "
            "delta updates, no movable sources)");
  EXPECT_EQ(lines[4],
            "InvalidArgument: reading region 5 from rank 0 (host a): no key of "
            "the peer covers its source");
  // The refused open, then the one allocation opened and closed.
  EXPECT_EQ(lines[5],
            "IpcOpenMemHandle device=0 bytes=512 refused: "
            "cudaErrorInvalidResourceHandle | IpcOpenMemHandle device=0 "
            "bytes=4096 -> refs=1 | IpcCloseMemHandle bytes=4096 -> refs=0");
}

// Writes `s` to `fd` length first; ReadString reads it back.
void WriteString(int fd, const std::string& s) {
  const uint64_t n = s.size();
  ASSERT_EQ(::write(fd, &n, sizeof n), static_cast<ssize_t>(sizeof n));
  ASSERT_EQ(::write(fd, s.data(), n), static_cast<ssize_t>(n));
}
std::string ReadString(int fd) {
  uint64_t n = 0;
  if (::read(fd, &n, sizeof n) != sizeof n) return "";
  std::string s(n, '\0');
  for (size_t got = 0; got < n;) {
    const ssize_t r = ::read(fd, s.data() + got, n - got);
    if (r <= 0) return "";
    got += static_cast<size_t>(r);
  }
  return s;
}

// What a session sends besides the data (its hashes, as buffers) travels
// between the ranks' mailboxes: 100000 bytes one way (several datagrams),
// 16 back, both ranks sending before they receive; a message longer than
// the buffer is DataLoss and one that never comes times out, each naming
// the operation.
TEST(CudaIpcExchangeTest, BufferMessagesTravelBetweenProcesses) {
  int to_one[2], to_zero[2];
  ASSERT_EQ(::pipe(to_one), 0);
  ASSERT_EQ(::pipe(to_zero), 0);
  const std::vector<std::string> out = testing::InChildren(2, [&](uint32_t r) {
    auto ex = Exchange(Emulated(), r);
    WriteString(r == 0 ? to_one[1] : to_zero[1], Must(ex->Address()));
    const uint32_t peer = 1 - r;
    MustOk(ex->Connect(peer, ReadString(r == 0 ? to_zero[0] : to_one[0]),
                       "rank " + std::to_string(peer)));
    BoundRegion region{0, 0, 1, {}, 1, 9};  // names the message (its tag)
    std::vector<uint8_t> mine(r == 0 ? 100000 : 16), theirs(100000, 0);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = Pattern(i + r);
    uint64_t received = 0;
    ExchangeOp send{&region, {}, peer, Kind::kSend};
    send.buffer = mine.data();
    send.buffer_bytes = mine.size();
    ExchangeOp receive{&region, {}, peer, Kind::kReceive};
    receive.buffer = theirs.data();
    receive.buffer_bytes = r == 0 ? 8 : theirs.size();
    receive.received = &received;
    ExchangeStats stats;
    std::string log = ex->Run({send, receive}, Within30s(), &stats).ToString();
    const size_t n = r == 0 ? 16 : 100000;
    bool exact = r == 0 || received == n;
    for (size_t i = 0; i < received; ++i)
      exact &= theirs[i] == Pattern(i + peer);
    log += exact ? " exact" : " WRONG";
    log += " sent " + std::to_string(stats.messages_sent) + "/" +
           std::to_string(stats.bytes_sent);
    ExchangeRunOptions soon = Within30s();
    soon.deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    return log + " | " + ex->Run({receive}, soon, nullptr).ToString();
  });
  EXPECT_EQ(out[0],
            "DataLoss: receiving region 9 from rank 1: received 16 bytes, "
            "expected at most 8 exact sent 1/100000 | Unavailable: receiving "
            "region 9 from rank 1: timed out");
  EXPECT_EQ(out[1],
            "OK exact sent 1/16 | Unavailable: receiving region 9 from rank "
            "0: timed out");
}

// The settings it takes.
TEST(CudaIpcExchangeTest, TakesOnlyTheDeviceSetting) {
  EXPECT_OK(CheckCudaIpcOptions(PeerExchangeOptions().Set("device", "1")));
  EXPECT_THAT(CheckCudaIpcOptions(PeerExchangeOptions().Set("tls", "tcp")),
              testing::StatusIs(StatusCode::kInvalidArgument,
                                "peer exchange \"cuda-ipc\" has no setting "
                                "\"tls\" (it takes: device)"));
  EXPECT_THAT(
      MakeCudaIpcExchangeOver(Emulated(),
                              {0, PeerExchangeOptions().Set("device", "gpu0")}),
      testing::StatusIs(StatusCode::kInvalidArgument,
                        "peer exchange \"cuda-ipc\": setting \"device\" "
                        "must be a CUDA device ordinal, got \"gpu0\""));
  // Registered by name; no command-line flags (the self-test's buffers
  // are host memory, which it cannot export).
  const PeerExchangeBackend* backend = Must(FindPeerExchange("cuda-ipc"));
  EXPECT_TRUE(backend->flags.empty());
}

// One rank of a live session between processes over "cuda-ipc" on this
// process's emulated device: its fragments (rank 0 the sources, rank 1
// the targets) in one emulated allocation, kSlot bytes apart. Returns the
// rank's account: per update its outcome (the targets checked against the
// pattern of that update), then its IPC calls after Close.
constexpr uint64_t kSlot = 8192;

std::string SessionRank(uint32_t rank, const std::string& dir,
                        const WeightPlacementManifest& source,
                        const WeightPlacementManifest& target, uint64_t updates,
                        uint64_t corrupt_update = 0) {
  auto api = Emulated();
  // Only in this child: the exchange made by name over the emulation.
  MustOk(RegisterPeerExchange({"cuda-ipc-emulated",
                               "cuda-ipc over the host emulation",
                               [api](const PeerExchangeConfig& c) {
                                 return MakeCudaIpcExchangeOver(api, c);
                               },
                               &CheckCudaIpcOptions}));
  const WeightPlacementManifest& mine = rank == 0 ? source : target;
  auto* base = static_cast<uint8_t*>(
      Must(api->Malloc(0, mine.fragments().size() * kSlot)));
  HostBuffers buffers;
  std::map<std::string, uint64_t> offsets;
  for (const PlacementFragment* f : mine.fragments()) {
    const uint64_t offset = offsets.size() * kSlot;
    offsets[f->placement_fragment_id()] = offset;
    buffers.data[f->placement_fragment_id()] = base + offset;
    std::memset(base + offset, 0xEE, f->nbytes());
  }
  buffers.bindings = Must(testing::BindingBuilder(mine)
                              .AddressOf([&](const PlacementFragment& f) {
                                return reinterpret_cast<uint64_t>(base) +
                                       offsets[f.placement_fragment_id()];
                              })
                              .Build());
  const auto tensors = TensorIndex(mine);
  auto rdv = Must(OpenRendezvous(dir));
  LiveSessionOptions o;
  o.session = "ipc";
  o.rank = rank;
  o.ranks = 2;
  o.exchange = "cuda-ipc-emulated";
  o.timeout = std::chrono::seconds(20);
  o.corrupt_received_in_update = corrupt_update;
  LiveBindings bindings;
  (rank == 0 ? bindings.sources : bindings.targets) = buffers.bindings;
  if (rank == 0) FillPattern(source, tensors, buffers, nullptr, 1);
  auto session =
      Must(LiveSession::Open(*rdv, source, target, std::move(bindings), o));
  std::string out;
  for (uint64_t g = 1; g <= updates; ++g) {
    if (rank == 0 && g > 1) FillPattern(source, tensors, buffers, nullptr, g);
    Result<LiveUpdateReport> r = session->Update(g);
    out += r.ok() ? "updated " + std::to_string(g) + " gets " +
                        std::to_string(r->gets) + " messages " +
                        std::to_string(r->messages_sent) + " verified " +
                        std::to_string(r->verified_regions)
                  : r.status().ToString();
    if (rank == 1) {
      const std::string wrong =
          VerifyPattern(target, tensors, buffers, nullptr, g);
      out += wrong.empty() ? " exact" : " " + wrong;
    }
    out += "; ";
  }
  MustOk(session->Close());
  out += IpcCalls(*api) + "; ";
  session.reset();  // nothing more is released
  return out + IpcCalls(*api);
}

// A standing session between two processes: the trainer's rank registers
// its emulated device memory, the engine's reads every region straight
// into its own (small strided regions included: pull_every_region), three
// updates each byte-exact, one handle opened for the whole session and
// closed at Close.
TEST(CudaIpcSessionTest, StandingSessionMovesDeviceMemoryBetweenProcesses) {
  // uint8 [8, 16, 64] from whole to halves of dim 1: 2 regions of 8 rows
  // of 512 bytes, strided on the source side.
  const auto source = testing::CubeLayout(1, 0, {8, 16, 64});
  const auto target = testing::CubeLayout(2, 1, {8, 16, 64});
  testing::TempDir dir;
  const std::vector<std::string> out = testing::InChildren(2, [&](uint32_t r) {
    return SessionRank(r, dir.path(), source, target, 3);
  });
  EXPECT_EQ(out[0],
            "updated 1 gets 0 messages 0 verified 0; updated 2 gets 0 messages "
            "0 verified 0; updated 3 gets 0 messages 0 verified 0; "
            "IpcGetMemHandle device=0 bytes=8192; IpcGetMemHandle device=0 "
            "bytes=8192");
  // Both regions read and verified each time; the handle opened once for
  // the session and closed at Close.
  EXPECT_EQ(out[1],
            "updated 1 gets 2 messages 0 verified 2 exact; updated 2 gets 2 "
            "messages 0 verified 2 exact; updated 3 gets 2 messages 0 verified "
            "2 exact; "
            "IpcOpenMemHandle device=0 bytes=8192 -> refs=1 | "
            "IpcCloseMemHandle bytes=8192 -> refs=0; "
            "IpcOpenMemHandle device=0 bytes=8192 -> refs=1 | "
            "IpcCloseMemHandle bytes=8192 -> refs=0");
}

// The verification hashes travel through the mailboxes: a byte flipped
// in update 2 after it arrived fails that update on both ranks naming the
// region; update 3 then verifies again.
TEST(CudaIpcSessionTest, AByteFlippedOnArrivalFailsTheUpdateOnBothRanks) {
  const auto source = testing::CubeLayout(1, 0, {8, 16, 64});
  const auto target = testing::CubeLayout(2, 1, {8, 16, 64});
  testing::TempDir dir;
  const std::vector<std::string> out = testing::InChildren(2, [&](uint32_t r) {
    return SessionRank(r, dir.path(), source, target, 3, 2);
  });
  const std::string failure =
      "region 0 (tensor w, target participant p-d0-p0-e0-t0) from rank 0 "
      "(source p-d0-p0-e0-t0): the bytes received differ from what the "
      "source sent (XXH3-64 a19cc2da3648e2cd here, c054a52c7c577065 at the "
      "source) (the session stays open: retry the update or run the next "
      "one)";
  EXPECT_EQ(out[0],
            "updated 1 gets 0 messages 0 verified 0; Aborted: live session ipc "
            "failed as decided by rank 1: DataLoss: live session ipc, rank 1, "
            "update 2: " +
                failure +
                "; updated 3 gets 0 messages 0 verified 0; IpcGetMemHandle "
                "device=0 bytes=8192; IpcGetMemHandle device=0 bytes=8192");
  EXPECT_EQ(out[1],
            "updated 1 gets 2 messages 0 verified 2 exact; DataLoss: live "
            "session ipc, rank 1, update 2: " +
                failure +
                " tensor w, fragment "
                "sha256:0aaa3dbd21b4940e6755caddeae9bdf7297d3620f194c1c4d605b5"
                "af322608b8, global element 0, byte 0: expected 60, got 102; "
                "updated 3 gets 2 messages 0 verified 2 exact; "
                "IpcOpenMemHandle device=0 bytes=8192 -> refs=1 | "
                "IpcCloseMemHandle bytes=8192 -> refs=0; "
                "IpcOpenMemHandle device=0 bytes=8192 -> refs=1 | "
                "IpcCloseMemHandle bytes=8192 -> refs=0");
}

}  // namespace
}  // namespace reshard::internal
