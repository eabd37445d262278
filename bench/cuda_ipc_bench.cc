// CUDA IPC benchmark: the "cuda-ipc" peer exchange's remote read (kGet)
// between two processes on device 0, against one device-to-device copy of
// the same bytes inside the reading process, measured in the same run
// (ratio = baseline ms / get ms; goal >= 0.8).
//
// A live session cannot run over CUDA memory yet: the exchange declares
// host memory only (PeerExchangeCapabilities::memory_kinds), and the
// session's local copies and verification hashes read memory on the host,
// so a session over `cuda:N` bindings is refused by RequireMemoryKinds.
// This benchmark therefore drives the exchange directly, as a session's
// pull would: process 0 registers 256 MiB of cudaMalloc'd memory and
// publishes its key; process 1 connects, imports the key (the handle is
// opened once, untimed) and times ExchangeOp::kGet runs into its own
// device memory, interleaved with its baseline:
//  - contiguous: the whole 256 MiB as one region;
//  - regions: the same bytes as 4096 regions of 64 KiB in one Run;
//  - strided: 2048 rows of 64 KiB at a pitch of 128 KiB (128 MiB) into a
//    contiguous target (the gather/scatter path of copy_lowering.h).
// The baseline is cudaMemcpy2DAsync of height 1 (one per MaxPitch bytes)
// between two of the reader's own allocations and a stream
// synchronisation; each Run synchronises its stream before returning.
// Bytes are not checked here (CudaIpcGpuTest checks them).
//
// CUDA does not survive fork: both ranks are children forked before either
// touches CUDA, and this process never does (the device count is asked in
// a child too).
//
// Usage: reshard_bench_cuda_ipc [--rounds N] [--json]
// Prints a markdown table (and with --json one JSON object per case); on a
// machine without a CUDA device prints one line saying so and exits 0.
// Exits 1 on an error, whatever the goals.

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_compare.h"
#include "exec_cuda/cuda_transport.h"
#include "exec_cuda/device_api.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/sdk/peer_exchange.h"
#include "testing/children.h"

namespace {

using namespace reshard;  // NOLINT
using cuda::DeviceApi;
using cuda::StreamHandle;
using Flags = bench::CompareFlags;
using reshard::testing::ReadMessage;
using reshard::testing::WriteMessage;

constexpr double kGoal = 0.8;
constexpr uint64_t kBytes = uint64_t{256} << 20;
constexpr uint64_t kChunk = uint64_t{64} << 10;

// Rank 0: kBytes of device memory, registered; waits for rank 1.
Status Exporter(int to_one, int from_one) {
  RESHARD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceApi> api,
                           cuda::RuntimeDeviceApi());
  RESHARD_ASSIGN_OR_RETURN(void* p, api->Malloc(0, kBytes));
  auto exchange = MakePeerExchange("cuda-ipc", {0, {}});
  if (!exchange.ok()) return exchange.status();
  RESHARD_ASSIGN_OR_RETURN(const std::string address, (*exchange)->Address());
  RESHARD_ASSIGN_OR_RETURN(const std::string key,
                           (*exchange)->RegisterMemory(p, kBytes));
  WriteMessage(to_one, address);
  WriteMessage(to_one, key);
  WriteMessage(to_one, std::to_string(reinterpret_cast<uint64_t>(p)));
  ReadMessage(from_one);  // rank 1 is done with the memory
  return api->Free(p);
}

// One measured case: its regions and the bytes they move.
struct Case {
  std::string name;
  std::vector<BoundRegion> regions;
  uint64_t bytes = 0;
};

std::vector<Case> Cases(uint64_t base, uint64_t dst) {
  std::vector<Case> cases(3);
  cases[0] = {"contiguous 256 MiB, one region", {}, kBytes};
  cases[0].regions.push_back({base, dst, kBytes, {}, kBytes, 0});
  cases[1] = {"256 MiB as 4096 regions of 64 KiB", {}, kBytes};
  for (uint64_t at = 0; at < kBytes; at += kChunk) {
    cases[1].regions.push_back({base + at, dst + at, kChunk, {}, kChunk, 0});
  }
  const uint64_t rows = kBytes / (2 * kChunk);
  cases[2] = {"strided 2048 rows of 64 KiB at a 128 KiB pitch", {}, kBytes / 2};
  cases[2].regions.push_back(
      {base, dst, kChunk, {{rows, 2 * kChunk, kChunk}}, kBytes / 2, 0});
  return cases;
}

std::string Table(const std::vector<bench::Comparison>& results,
                  const Flags& f) {
  const bench::CompareTable table{
      "cuda-ipc kGet between two processes on device 0 against one "
      "device-to-device copy of the same bytes in the reader, medians of " +
          std::to_string(f.rounds) +
          " interleaved rounds (exchange driven directly: live sessions over "
          "CUDA memory are not supported yet)",
      "get", "baseline", kGoal};
  return bench::ComparisonReport(table, results, f.rounds, f.json);
}

// Every case read from rank 0's memory at `base` through `exchange`.
Result<std::string> Measured(DeviceApi& api, PeerExchange& exchange,
                             uint64_t key, uint64_t base, const Flags& f) {
  RESHARD_ASSIGN_OR_RETURN(void* dst, api.Malloc(0, kBytes));
  RESHARD_ASSIGN_OR_RETURN(void* src, api.Malloc(0, kBytes));
  RESHARD_ASSIGN_OR_RETURN(const StreamHandle stream, api.CreateStream(0));
  std::vector<bench::Comparison> results;
  Status st;
  for (const Case& c : Cases(base, reinterpret_cast<uint64_t>(dst))) {
    std::vector<ExchangeOp> ops;
    for (const BoundRegion& r : c.regions) {
      ops.push_back({&r, {}, 0, ExchangeOp::Kind::kGet, key});
    }
    auto get = [&]() -> Status {
      ExchangeRunOptions o;
      o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      return exchange.Run(ops, o, nullptr);
    };
    auto baseline = [&] {
      return bench::ContiguousCopy(api, dst, src, c.bytes,
                                   cuda::CopyKind::kDeviceToDevice, stream);
    };
    Result<bench::Comparison> r =
        bench::MeasureInterleaved(baseline, get, f.rounds);
    if (!r.ok()) {
      st = r.status().WithContext(c.name);
      break;
    }
    r->name = c.name;
    r->bytes = c.bytes;
    results.push_back(std::move(*r));
  }
  RESHARD_RETURN_NOT_OK(st);
  RESHARD_RETURN_NOT_OK(api.DestroyStream(stream));
  RESHARD_RETURN_NOT_OK(api.Free(src));
  RESHARD_RETURN_NOT_OK(api.Free(dst));
  return Table(results, f);
}

// Rank 1: imports rank 0's key and measures; the table, or an error.
Result<std::string> Importer(int from_zero, int to_zero, const Flags& f) {
  const std::string address = ReadMessage(from_zero);
  const std::string packed = ReadMessage(from_zero);
  const std::string base = ReadMessage(from_zero);
  if (base.empty()) return Status::Unavailable("rank 0 published no memory");
  RESHARD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceApi> api,
                           cuda::RuntimeDeviceApi());
  auto exchange = MakePeerExchange("cuda-ipc", {1, {}});
  if (!exchange.ok()) return exchange.status();
  RESHARD_RETURN_NOT_OK((*exchange)->Connect(0, address, "rank 0"));
  RESHARD_ASSIGN_OR_RETURN(const uint64_t key,
                           (*exchange)->ImportRemoteKey(0, packed));
  Result<std::string> out =
      Measured(*api, **exchange, key, std::stoull(base), f);
  const Status closed = (*exchange)->Disconnect(0);
  WriteMessage(to_zero, "done");
  if (out.ok() && !closed.ok()) return closed;
  return out;
}

// Both ranks in children; rank 1's output prefixed "ok\n" or "error\n".
std::vector<std::string> RunRanks(const Flags& flags) {
  int zero_to_one[2], one_to_zero[2];
  if (::pipe(zero_to_one) != 0 || ::pipe(one_to_zero) != 0) return {};
  return testing::InChildren(2, [&](uint32_t r) -> std::string {
    // A rank waiting on the other must not outlive this process when it
    // is killed (a timeout), holding the device.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (r == 0) {
      const Status st = Exporter(zero_to_one[1], one_to_zero[0]);
      if (st.ok()) return "";
      // Unblocks rank 1 if this rank failed before publishing: it reads
      // an empty base and gives up.
      for (int i = 0; i < 3; ++i) WriteMessage(zero_to_one[1], "");
      return st.ToString();
    }
    Result<std::string> out = Importer(zero_to_one[0], one_to_zero[1], flags);
    return out.ok() ? "ok\n" + *out : "error\n" + out.status().ToString();
  });
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!bench::ParseCompareFlags(argc, argv, &flags)) return 2;
  const std::string devices = testing::InChild([] {
    const CudaInfo info = QueryCuda();
    return info.built ? std::to_string(info.devices) : "not built";
  });
  if (devices == "0" || devices == "not built" || devices.empty()) {
    bench::PrintNoDevice("reshard_bench_cuda_ipc", devices != "not built");
    return 0;
  }
  const std::vector<std::string> out = RunRanks(flags);
  if (out.size() == 2 && out[1].rfind("ok\n", 0) == 0) {
    std::fputs(out[1].c_str() + 3, stdout);
    return 0;
  }
  std::fprintf(stderr, "reshard_bench_cuda_ipc: rank 1: %s\nrank 0: %s\n",
               out.size() == 2 ? out[1].c_str() : "no ranks",
               out.size() == 2 ? out[0].c_str() : "");
  return 1;
}
