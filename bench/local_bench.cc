// Local executor benchmark: reshard a [128, 4096, 4096] uint8 tensor (2 GiB)
// between TP layouts in memory and compare with memcpy of the same bytes
// measured in the same run: rounds of (reshard, memcpy), the order
// alternating, min / median / max of the per-round ratio.
//
// Usage: reshard_bench_local [--threads N] [--scale S]  (S divides dim 0)

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
#include "reshard/backends/local_transport.h"
#include "reshard/bound_plan.h"
#include "reshard/plan.h"
#include "selftest/host_buffers.h"
#include "testing/placement_builders.h"

namespace {

using namespace reshard;  // NOLINT

WeightPlacementManifest Layout(int64_t tp, int64_t dim, int64_t d0) {
  return testing::CubeLayout(tp, dim, {d0, 4096, 4096});
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t threads = 2;
  int64_t d0 = 128;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--scale") && i + 1 < argc) {
      d0 = 128 / std::atoi(argv[++i]);
    }
  }
  struct Case {
    const char* name;
    int64_t src_tp, src_dim, dst_tp, dst_dim;
  };
  const Case cases[] = {{"TP4 -> TP8, dim 0 (contiguous)", 4, 0, 8, 0},
                        {"TP4 dim 0 -> TP4 dim 1", 4, 0, 4, 1},
                        {"TP4 dim 0 -> TP4 dim 2", 4, 0, 4, 2}};
  auto transport = LocalTransport::Make({.threads = threads});
  std::printf("local executor, [%lld, 4096, 4096] uint8, %u threads\n",
              static_cast<long long>(d0), threads);
  std::printf("%-34s %8s %10s %10s   %s\n", "case", "ops", "seconds", "GB/s",
              "ratio to memcpy (min / median / max of rounds)");
  for (const Case& c : cases) {
    auto src = Layout(c.src_tp, c.src_dim, d0);
    auto dst = Layout(c.dst_tp, c.dst_dim, d0);
    auto plan = LogicalTransferPlan::Make(src, dst);
    auto sb = internal::AllocateHostBuffers(src, "bench-source");
    auto tb = internal::AllocateHostBuffers(dst, "bench-target");
    if (!plan.ok() || !sb.ok() || !tb.ok()) return 1;
    for (const auto* f : src.fragments()) {
      std::memset(sb->data.at(f->placement_fragment_id()), 0x5A, f->nbytes());
    }
    for (const auto* f : dst.fragments()) {
      std::memset(tb->data.at(f->placement_fragment_id()), 0, f->nbytes());
    }
    auto bound =
        BoundTransferPlan::Bind(*plan, src, sb->bindings, dst, tb->bindings);
    if (!bound.ok()) return 1;
    std::vector<double> seconds, ratios;
    for (int round = 0; round < bench::kMinRounds; ++round) {
      // The baseline copies the same byte count with the same threads.
      double memcpy_gbps = 0;
      if (round % 2 == 1) {
        memcpy_gbps = internal::MeasureMemcpyGbps(bound->bytes(), threads);
      }
      const auto t0 = std::chrono::steady_clock::now();
      auto id = (*transport)->Submit(*bound);
      if (!id.ok() || !(*transport)->Wait(*id).ok()) return 1;
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      if (round % 2 == 0) {
        memcpy_gbps = internal::MeasureMemcpyGbps(bound->bytes(), threads);
      }
      seconds.push_back(s);
      ratios.push_back(bound->bytes() / s / 1e9 / memcpy_gbps);
    }
    const bench::Spread t = bench::SpreadOf(seconds);
    const bench::Spread r = bench::SpreadOf(ratios);
    std::printf("%-34s %8zu %10.4f %10.2f   %.2f / %.2f / %.2fx\n", c.name,
                bound->regions().size(), t.median,
                bound->bytes() / t.median / 1e9, r.min, r.median, r.max);
  }
  return 0;
}
