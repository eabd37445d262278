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
  EXPECT_EQ(address, "cuda-ipc:" + std::to_string(::getpid()));
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
            "exchange \"cuda-ipc\" reads every region and sends no messages "
            "(a session over it pulls: protocol auto or pull, no delta "
            "updates, no movable sources)");
  EXPECT_EQ(lines[4],
            "InvalidArgument: reading region 5 from rank 0 (host a): no key of "
            "the peer covers its source");
  // The refused open, then the one allocation opened and closed.
  EXPECT_EQ(lines[5],
            "IpcOpenMemHandle device=0 bytes=512 refused: "
            "cudaErrorInvalidResourceHandle | IpcOpenMemHandle device=0 "
            "bytes=4096 -> refs=1 | IpcCloseMemHandle bytes=4096 -> refs=0");
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
                        const WeightPlacementManifest& target,
                        uint64_t updates) {
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
  o.verify = false;  // its hash round is messages
  LiveBindings bindings;
  (rank == 0 ? bindings.sources : bindings.targets) = buffers.bindings;
  if (rank == 0) FillPattern(source, tensors, buffers, nullptr, 1);
  auto session =
      Must(LiveSession::Open(*rdv, source, target, std::move(bindings), o));
  std::string out;
  for (uint64_t g = 1; g <= updates; ++g) {
    if (rank == 0 && g > 1) FillPattern(source, tensors, buffers, nullptr, g);
    Result<LiveUpdateReport> r = session->Update(g);
    out += r.ok() ? "updated " + std::to_string(g) : r.status().ToString();
    if (rank == 1) {
      const std::string wrong =
          VerifyPattern(target, tensors, buffers, nullptr, g);
      out += wrong.empty() ? " exact" : " " + wrong;
    }
    out += "; ";
  }
  MustOk(session->Close());
  out += IpcCalls(*api) + "; ";
  session.reset();  // the session's exchange goes with it
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
            "updated 1; updated 2; updated 3; IpcGetMemHandle device=0 "
            "bytes=8192; IpcGetMemHandle device=0 bytes=8192");
  // Open while the session is, closed once it is gone.
  EXPECT_EQ(out[1],
            "updated 1 exact; updated 2 exact; updated 3 exact; "
            "IpcOpenMemHandle device=0 bytes=8192 -> refs=1; "
            "IpcOpenMemHandle device=0 bytes=8192 -> refs=1 | "
            "IpcCloseMemHandle bytes=8192 -> refs=0");
}

}  // namespace
}  // namespace reshard::internal
