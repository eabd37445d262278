// RunSelfTest: real buffers, real bindings, the real executor.

#include "selftest/selftest.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "reshard/binding.h"
#include "reshard/bound_plan.h"
#include "reshard/local_transport.h"
#include "reshard/plan.h"
#include "selftest/host_buffers.h"
#include "selftest/live_selftest.h"
#include "selftest/pattern.h"
#include "selftest/store_selftest.h"

namespace reshard {

Result<SelfTestReport> RunSelfTest(const WeightPlacementManifest& source,
                                   const WeightPlacementManifest& target,
                                   const SelfTestOptions& options) {
  if (!options.via_store.empty()) {
    return internal::RunStoreSelfTest(source, target, options);
  }
  if (options.transport == "ucx") {
    return internal::RunUcxSelfTest(source, target, options);
  }
  if (options.transport != "local") {
    return Status::Unimplemented("transport \"" + options.transport +
                                 "\" is not available for the self-test");
  }
  using Clock = std::chrono::steady_clock;
  SelfTestReport report;
  auto t0 = Clock::now();
  RESHARD_ASSIGN_OR_RETURN(auto plan,
                           LogicalTransferPlan::Make(source, target));
  RESHARD_ASSIGN_OR_RETURN(
      internal::HostBuffers src,
      internal::AllocateHostBuffers(source, "selftest-source"));
  RESHARD_ASSIGN_OR_RETURN(
      internal::HostBuffers dst,
      internal::AllocateHostBuffers(target, "selftest-target"));
  RESHARD_ASSIGN_OR_RETURN(
      auto bound, BoundTransferPlan::Bind(plan, source, src.bindings, target,
                                          dst.bindings));
  report.plan_seconds =
      std::chrono::duration<double>(Clock::now() - t0).count();
  const auto tensor_index = internal::TensorIndex(source);
  auto phase = [&](std::string_view name) -> internal::PatternProgress {
    if (!options.progress) return nullptr;
    return [&options, name](uint64_t done, uint64_t total) {
      options.progress(name, total == 0 ? 1.0 : double(done) / double(total));
    };
  };
  internal::FillPattern(source, tensor_index, src, phase("fill"));
  for (const auto* f : target.fragments()) {
    std::memset(dst.data.at(f->placement_fragment_id()), 0xD7, f->nbytes());
  }
  RESHARD_ASSIGN_OR_RETURN(auto transport,
                           LocalTransport::Make({.threads = options.threads}));
  t0 = Clock::now();
  // The generation and lease fence, right before the bytes move.
  RESHARD_RETURN_NOT_OK(bound.CheckCurrent(src.bindings, dst.bindings));
  if (options.progress) options.progress("transfer", 0);
  RESHARD_ASSIGN_OR_RETURN(TransferId id, transport->Submit(bound));
  RESHARD_RETURN_NOT_OK(transport->Wait(id));
  if (options.progress) options.progress("transfer", 1);
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  report.bytes = bound.bytes();
  report.operations = bound.regions().size();
  report.segments = plan.summary().segments;
  // Verify every target byte.
  report.mismatch =
      internal::VerifyPattern(target, tensor_index, dst, phase("verify"));
  report.verified = report.mismatch.empty();
  if (options.measure_memcpy) {
    report.memcpy_gbps = internal::MeasureMemcpyGbps(
        std::min<uint64_t>(report.bytes, uint64_t{256} << 20), options.threads);
  }
  return report;
}

}  // namespace reshard
