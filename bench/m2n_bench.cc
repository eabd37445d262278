// NCCL M2N benchmark: M2nBackend (lowered tensors through the plugin
// libreshard_m2n.so) against ncclReshard called directly on the same
// tensors, buffers and descriptors (m2n_direct.h), measured in the same
// run: ratio = direct ms / backend ms, goal >= 0.9.
//
// A machine with one GPU can only run a one-rank communicator, whose
// ncclReshard is a self-copy (source and target both rank 0, the case
// nccl_m2n.h keeps for API-contract testing); that is what is measured
// here, not a transfer between jobs. Cases, float32, every tensor whole on
// rank 0 on both sides, moved in one ncclM2nGroupStart/End group on the
// legacy default stream and synchronised:
//  - 8 tensors of [4096, 4096] (512 MiB);
//  - 256 tensors of [256, 1024] (256 MiB), where per-call costs show.
// After one untimed round of each, rounds interleave (direct, backend,
// ...); the figures are medians. Bytes are not checked here (M2nGpuTest
// checks them).
//
// The process must load NCCL 2.30.5 or newer: where reshard was linked
// against an older libnccl.so.2 (the toolkit's 2.28), put the M2N wheel's
// nvidia/nccl/lib first on LD_LIBRARY_PATH (scripts/gpu-check.sh does);
// otherwise the plugin refuses in one line and the benchmark exits 1.
//
// Usage: reshard_bench_m2n [--rounds N] [--json]
// Prints a markdown table (and with --json one JSON object per case).
// Without a CUDA device, or in a build without the M2N plugin, prints one
// line saying so and exits 0. Exits 1 on an error, whatever the goals.

#include <dlfcn.h>

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
#include "exec_m2n/m2n_backend.h"
#include "exec_m2n/m2n_lowering.h"
#include "reshard/backends/cuda_transport.h"

#ifdef RESHARD_BENCH_M2N_DIRECT
#include "bench/m2n_direct.h"
#endif

namespace {

using namespace reshard;       // NOLINT
using namespace reshard::m2n;  // NOLINT

constexpr double kGoal = 0.9;

using Flags = bench::CompareFlags;

#ifdef RESHARD_BENCH_M2N_DIRECT

struct Case {
  std::string name;
  size_t count;
  Dims shape;
};

// A one-rank self-copy of a float32 tensor of `shape`, as lowered.
Result<M2nTensor> SelfCopy(const std::string& id, const Dims& shape) {
  const M2nBox whole{0, Dims(shape.size(), 0), shape};
  M2nDecision d =
      LowerTensorToM2n({id, shape, "float32", "float32", {whole}, {whole}, 1});
  if (!d.m2n) return Status::Internal("not lowered: " + d.reason);
  return *d.m2n;
}

// The tensors of `c` in fresh device buffers, direct against backend.
Result<bench::Comparison> RunCase(cuda::DeviceApi& api, M2nBackend& backend,
                                  bench::DirectM2n& direct, const Case& c,
                                  int rounds) {
  std::vector<M2nTensor> tensors;
  std::vector<M2nBuffers> buffers;
  uint64_t bytes = 4;
  for (int64_t d : c.shape) bytes *= static_cast<uint64_t>(d);
  Status st;
  for (size_t i = 0; i < c.count && st.ok(); ++i) {
    Result<M2nTensor> t = SelfCopy("t" + std::to_string(i), c.shape);
    Result<void*> src = api.Malloc(0, bytes);
    Result<void*> dst = api.Malloc(0, bytes);
    st = !t.ok() ? t.status() : !src.ok() ? src.status() : dst.status();
    if (src.ok()) buffers.push_back({*src, dst.ok() ? *dst : nullptr});
    if (t.ok()) tensors.push_back(std::move(*t));
  }
  auto by_backend = [&]() -> Status {
    RESHARD_RETURN_NOT_OK(backend.Run(tensors, buffers, nullptr));
    return backend.Synchronize(nullptr);
  };
  auto by_direct = [&]() -> Status {
    const std::string e = direct.Run(tensors, buffers);
    return e.empty() ? Status::OK() : Status::Internal(e);
  };
  Result<bench::Comparison> r =
      st.ok() ? bench::MeasureInterleaved(by_direct, by_backend, rounds)
              : Result<bench::Comparison>(st);
  for (const M2nBuffers& b : buffers) {
    (void)api.Free(b.source);
    if (b.target != nullptr) (void)api.Free(b.target);
  }
  if (!r.ok()) return r.status();
  r->name = c.name;
  r->bytes = bytes * c.count;
  return r;
}

void Print(const std::vector<bench::Comparison>& results,
           const std::string& version, const Flags& f) {
  const bench::CompareTable table{
      "NCCL M2N through M2nBackend against ncclReshard called directly, one-"
      "rank self-copy on device 0 (" +
          version + "), medians of " + std::to_string(f.rounds) +
          " interleaved rounds",
      "backend", "direct", kGoal};
  std::fputs(bench::ComparisonReport(table, results, f.rounds, f.json).c_str(),
             stdout);
}

// The baseline's module, opened.
Result<bench::DirectM2n*> LoadDirect() {
  void* lib = dlopen(RESHARD_BENCH_M2N_DIRECT, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return Status::Unavailable(dlerror());
  using Entry = bench::DirectM2n* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(lib, "ReshardBenchM2nDirect"));
  if (entry == nullptr) return Status::Unavailable(dlerror());
  bench::DirectM2n* direct = entry();
  const std::string e = direct->Open(0);
  if (!e.empty()) return Status::Unavailable("baseline: " + e);
  return direct;
}

Status Run(const Flags& flags) {
  RESHARD_ASSIGN_OR_RETURN(std::shared_ptr<cuda::DeviceApi> api,
                           cuda::RuntimeDeviceApi());
  RESHARD_ASSIGN_OR_RETURN(std::unique_ptr<M2nBackend> backend,
                           M2nBackend::MakeSingleRank(0));
  RESHARD_ASSIGN_OR_RETURN(bench::DirectM2n * direct, LoadDirect());
  const std::vector<Case> cases = {
      {"8 tensors [4096, 4096] float32", 8, Dims{4096, 4096}},
      {"256 tensors [256, 1024] float32", 256, Dims{256, 1024}}};
  std::vector<bench::Comparison> results;
  Status st;
  for (const Case& c : cases) {
    Result<bench::Comparison> r =
        RunCase(*api, *backend, *direct, c, flags.rounds);
    if (!r.ok()) {
      st = r.status().WithContext(c.name);
      break;
    }
    results.push_back(std::move(*r));
  }
  direct->Close();
  RESHARD_RETURN_NOT_OK(st);
  Print(results, backend->Version(), flags);
  return Status::OK();
}

#endif  // RESHARD_BENCH_M2N_DIRECT

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!bench::ParseCompareFlags(argc, argv, &flags)) return 2;
  const reshard::CudaInfo info = reshard::QueryCuda();
  if (info.devices == 0) {
    reshard::bench::PrintNoDevice("reshard_bench_m2n", info.built);
    return 0;
  }
#ifdef RESHARD_BENCH_M2N_DIRECT
  const reshard::Status st = Run(flags);
  if (!st.ok()) {
    std::fprintf(stderr, "reshard_bench_m2n: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
#else
  std::printf(
      "reshard_bench_m2n: this build has no NCCL M2N plugin (configure with "
      "RESHARD_M2N_ROOT holding the wheels: make m2n-venv); nothing "
      "measured\n");
  return 0;
#endif
}
