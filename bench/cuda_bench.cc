// CUDA executor benchmark: reshards through MakeCudaTransport() on device
// 0 and compares each with one contiguous copy of the same bytes measured
// in the same run (the project's rule: ratios against a baseline of the
// same run):
//  - D2D: the small-moe layouts (TP4/PP2/EP8/DP2 -> TP8/PP4/EP2/DP4),
//    every fragment a cudaMalloc of device 0, against one device-to-device
//    copy of the bytes the plan moves;
//  - H2D and D2H: a [64, 2048, 4096] uint8 cube, TP4 on dimension 0 in
//    pinned host memory (cudaMallocHost) to TP8 on dimension 1 in device
//    memory and back, against one pinned copy of the same bytes.
// The baseline is cudaMemcpy2DAsync of height 1 (one per MaxPitch bytes)
// and a stream synchronisation. Each case plans once (as a trainer
// resharding every step does) and times Reshard(plan, ..., transport):
// binding, submission and the wait. After one untimed round of each,
// rounds interleave (baseline, reshard, baseline, reshard, ...); the
// figures are medians and ratio = baseline ms / reshard ms (goal >= 0.8).
// Bytes are not checked here (the `gpu` tests check them).
//
// Usage: reshard_bench_cuda [--rounds N] [--json]
// Prints a markdown table (and with --json one JSON object per case); on a
// machine without a CUDA device prints one line saying so and exits 0.
// Exits 1 on an error, whatever the goals.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_compare.h"
#include "exec_cuda/cuda_transport.h"
#include "exec_cuda/device_api.h"
#include "reshard/api.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/gen.h"
#include "reshard/plan.h"
#include "testing/placement_builders.h"

namespace {

using namespace reshard;  // NOLINT
using cuda::CopyKind;
using cuda::DeviceApi;
using cuda::StreamHandle;

constexpr double kGoal = 0.8;

// Where a side's fragments live.
enum class Memory { kDevice0, kPinnedHost };

// Every fragment of a placement in one allocation of its own (cudaMalloc
// on device 0 or cudaMallocHost), bound per participant as "cuda:0" or
// "cpu"; released when destroyed.
class Side {
 public:
  static Result<std::unique_ptr<Side>> Make(DeviceApi& api,
                                            const WeightPlacementManifest& m,
                                            Memory memory,
                                            const std::string& instance) {
    std::unique_ptr<Side> side = Bare(api, memory);
    std::map<std::string, std::map<std::string, void*>> by_participant;
    for (const WeightPlacementPart& part : m.parts()) {
      for (const PlacementFragment& f : part.fragments()) {
        RESHARD_ASSIGN_OR_RETURN(void* p, side->Allocate(f.nbytes()));
        by_participant[part.participant_id()][f.placement_fragment_id()] = p;
      }
    }
    BufferBindingOptions o;
    o.instance_id = instance;
    o.device = memory == Memory::kDevice0 ? "cuda:0" : "cpu";
    for (const auto& [participant, buffers] : by_participant) {
      RESHARD_ASSIGN_OR_RETURN(auto binding,
                               BindBuffers(m, participant, buffers, o));
      side->bindings_.push_back(std::move(binding));
    }
    return side;
  }

  // A side with no fragments, for buffers Allocate adds.
  static std::unique_ptr<Side> Bare(DeviceApi& api, Memory memory) {
    return std::unique_ptr<Side>(new Side(api, memory));
  }

  ~Side() {
    for (void* p : ptrs_) {
      const Status st =
          memory_ == Memory::kDevice0 ? api_.Free(p) : api_.FreeHost(p);
      if (!st.ok()) std::fprintf(stderr, "%s\n", st.ToString().c_str());
    }
  }

  const std::vector<WeightRuntimeBindingManifest>& bindings() const {
    return bindings_;
  }

  // `bytes` of this side's memory, released with the side; pinned host
  // bytes are written once so that no round pays a first touch.
  Result<void*> Allocate(size_t bytes) {
    Result<void*> p = memory_ == Memory::kDevice0 ? api_.Malloc(0, bytes)
                                                  : api_.MallocHost(bytes);
    if (!p.ok()) return p.status();
    if (*p == nullptr) return *p;  // 0 bytes
    ptrs_.push_back(*p);
    if (memory_ == Memory::kPinnedHost) std::memset(*p, 0x5A, bytes);
    return *p;
  }

 private:
  Side(DeviceApi& api, Memory memory) : api_(api), memory_(memory) {}

  DeviceApi& api_;
  const Memory memory_;
  std::vector<void*> ptrs_;
  std::vector<WeightRuntimeBindingManifest> bindings_;
};

// One source -> target reshard against the contiguous copy of the bytes
// it moves between two buffers of the same memory kinds.
struct Case {
  std::string name;
  WeightPlacementManifest source, target;
  Memory from, to;
};

CopyKind KindOf(Memory from, Memory to) {
  if (from == Memory::kPinnedHost) {
    return to == Memory::kPinnedHost ? CopyKind::kHostToHost
                                     : CopyKind::kHostToDevice;
  }
  return to == Memory::kPinnedHost ? CopyKind::kDeviceToHost
                                   : CopyKind::kDeviceToDevice;
}

Result<bench::Comparison> RunCase(DeviceApi& api, Transport& transport,
                                  const Case& c, int rounds) {
  RESHARD_ASSIGN_OR_RETURN(const LogicalTransferPlan plan,
                           LogicalTransferPlan::Make(c.source, c.target));
  RESHARD_ASSIGN_OR_RETURN(auto src, Side::Make(api, c.source, c.from, "src"));
  RESHARD_ASSIGN_OR_RETURN(auto dst, Side::Make(api, c.target, c.to, "dst"));
  uint64_t bytes = 0;
  auto reshard = [&]() -> Status {
    RESHARD_ASSIGN_OR_RETURN(const ReshardReport report,
                             Reshard(plan, c.source, src->bindings(), c.target,
                                     dst->bindings(), transport));
    bytes = report.bytes;
    return Status::OK();
  };
  RESHARD_RETURN_NOT_OK(reshard());  // the byte count the baseline copies
  const std::unique_ptr<Side> base_src = Side::Bare(api, c.from);
  const std::unique_ptr<Side> base_dst = Side::Bare(api, c.to);
  RESHARD_ASSIGN_OR_RETURN(void* from, base_src->Allocate(bytes));
  RESHARD_ASSIGN_OR_RETURN(void* to, base_dst->Allocate(bytes));
  RESHARD_ASSIGN_OR_RETURN(const StreamHandle stream, api.CreateStream(0));
  auto baseline = [&] {
    return bench::ContiguousCopy(api, to, from, bytes, KindOf(c.from, c.to),
                                 stream);
  };
  Result<bench::Comparison> result =
      bench::MeasureInterleaved(baseline, reshard, rounds);
  RESHARD_RETURN_NOT_OK(api.DestroyStream(stream));
  if (!result.ok()) return result.status();
  result->name = c.name;
  result->bytes = bytes;
  return result;
}

Result<std::vector<Case>> Cases() {
  RESHARD_ASSIGN_OR_RETURN(const ModelSpec model,
                           ModelSpecFromJson(testing::ReadTestData(
                               "../../examples/models/small-moe.json")));
  RESHARD_ASSIGN_OR_RETURN(
      WeightPlacementManifest trainer,
      GenerateLayout(model, {.sizes = {.tp = 4, .pp = 2, .ep = 8, .dp = 2}}));
  RESHARD_ASSIGN_OR_RETURN(
      WeightPlacementManifest rollout,
      GenerateLayout(model, {.sizes = {.tp = 8, .pp = 4, .ep = 2, .dp = 4}}));
  const Dims shape{64, 2048, 4096};
  const auto tp4 = testing::CubeLayout(4, 0, shape);
  const auto tp8 = testing::CubeLayout(8, 1, shape);
  std::vector<Case> cases;
  cases.push_back({"D2D small-moe TP4/PP2/EP8/DP2 -> TP8/PP4/EP2/DP4",
                   std::move(trainer), std::move(rollout), Memory::kDevice0,
                   Memory::kDevice0});
  cases.push_back({"H2D cube [64,2048,4096] TP4 dim 0 -> TP8 dim 1", tp4, tp8,
                   Memory::kPinnedHost, Memory::kDevice0});
  cases.push_back({"D2H cube [64,2048,4096] TP8 dim 1 -> TP4 dim 0", tp8, tp4,
                   Memory::kDevice0, Memory::kPinnedHost});
  return cases;
}

void Print(const std::vector<bench::Comparison>& results,
           const bench::CompareFlags& flags) {
  const bench::CompareTable table{
      "CUDA executor on device 0 against one contiguous copy of the same "
      "bytes, medians of " +
          std::to_string(flags.rounds) + " interleaved rounds",
      "reshard", "baseline", kGoal};
  std::fputs(
      bench::ComparisonReport(table, results, flags.rounds, flags.json).c_str(),
      stdout);
}

// Every case through `transport`, whose memory `api` allocates.
Status Run(const bench::CompareFlags& flags, DeviceApi& api,
           Transport& transport) {
  RESHARD_ASSIGN_OR_RETURN(const std::vector<Case> cases, Cases());
  std::vector<bench::Comparison> results;
  for (const Case& c : cases) {
    Result<bench::Comparison> r = RunCase(api, transport, c, flags.rounds);
    if (!r.ok()) return r.status().WithContext(c.name);
    results.push_back(std::move(*r));
  }
  Print(results, flags);
  return Status::OK();
}

// The runtime's device API and executor.
Status RunOnCuda(const bench::CompareFlags& flags) {
  RESHARD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceApi> api,
                           cuda::RuntimeDeviceApi());
  RESHARD_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                           MakeCudaTransport());
  return Run(flags, *api, *transport);
}

}  // namespace

int main(int argc, char** argv) {
  bench::CompareFlags flags;
  flags.rounds = 5;
  if (!bench::ParseCompareFlags(argc, argv, &flags)) return 2;
  const CudaInfo info = QueryCuda();
  if (info.devices == 0) {
    bench::PrintNoDevice("reshard_bench_cuda", info.built);
    return 0;
  }
  const Status st = RunOnCuda(flags);
  if (!st.ok()) {
    std::fprintf(stderr, "reshard_bench_cuda: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
