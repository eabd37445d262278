// RunSelfTest: real buffers bound with BindBuffers, moved with Reshard (the
// path a framework takes), every target byte checked.

#include "selftest/selftest.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "reshard/api.h"
#include "reshard/backends/local_transport.h"
#include "reshard/plan.h"
#include "selftest/converted_pattern.h"
#include "selftest/host_buffers.h"
#include "selftest/live_selftest.h"
#include "selftest/pattern.h"
#include "selftest/store_selftest.h"

namespace reshard {
namespace {

using Clock = std::chrono::steady_clock;

// The pattern phases' progress, reported as fractions under `name`.
internal::PatternProgress Phase(const SelfTestOptions& options,
                                std::string_view name) {
  if (!options.progress) return nullptr;
  return [&options, name](uint64_t done, uint64_t total) {
    options.progress(name, total == 0 ? 1.0 : double(done) / double(total));
  };
}

// Host buffers of both layouts, sources filled with the pattern and
// targets poisoned, so that a byte not written cannot pass.
struct LocalBuffers {
  internal::HostBuffers sources;
  internal::HostBuffers targets;
};

Result<LocalBuffers> PrepareBuffers(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target,
    const std::unordered_map<std::string_view, uint64_t>& tensor_index,
    const SelfTestOptions& options) {
  LocalBuffers buffers;
  RESHARD_ASSIGN_OR_RETURN(buffers.sources, internal::AllocateHostBuffers(
                                                source, "selftest-source"));
  RESHARD_ASSIGN_OR_RETURN(buffers.targets, internal::AllocateHostBuffers(
                                                target, "selftest-target"));
  internal::FillPattern(source, tensor_index, buffers.sources,
                        Phase(options, "fill"));
  for (const auto* f : target.fragments()) {
    std::memset(buffers.targets.data.at(f->placement_fragment_id()), 0xD7,
                f->nbytes());
  }
  return buffers;
}

// The self-test in this process with the local executor.
Result<SelfTestReport> RunLocalSelfTest(const WeightPlacementManifest& source,
                                        const WeightPlacementManifest& target,
                                        const SelfTestOptions& options) {
  // Plan before allocating: invalid inputs fail before memory is committed.
  const auto t0 = Clock::now();
  PlanOptions plan_options;
  plan_options.convert = options.convert;
  plan_options.fp8_block = options.fp8_block;
  RESHARD_ASSIGN_OR_RETURN(
      auto plan, LogicalTransferPlan::Make(source, target, plan_options));
  const double plan_seconds =
      std::chrono::duration<double>(Clock::now() - t0).count();
  const auto tensor_index = internal::TensorIndex(source);
  RESHARD_ASSIGN_OR_RETURN(
      LocalBuffers buffers,
      PrepareBuffers(source, target, tensor_index, options));
  RESHARD_ASSIGN_OR_RETURN(auto transport,
                           LocalTransport::Make({.threads = options.threads}));
  if (options.progress) options.progress("transfer", 0);
  RESHARD_ASSIGN_OR_RETURN(
      ReshardReport moved,
      Reshard(plan, source, buffers.sources.bindings, target,
              buffers.targets.bindings, *transport));
  if (options.progress) options.progress("transfer", 1);
  SelfTestReport report;
  report.plan_seconds = plan_seconds + moved.bind_seconds;
  report.seconds = moved.transfer_seconds;
  report.bytes = moved.bytes;
  report.operations = moved.operations;
  report.segments = moved.segments;
  if (options.convert) {
    RESHARD_ASSIGN_OR_RETURN(
        auto check, internal::ConvertedPatternCheck::Make(
                        source, target, options.fp8_block, buffers.targets));
    report.mismatch = check->Verify(tensor_index, 0);
  } else {
    report.mismatch = internal::VerifyPattern(
        target, tensor_index, buffers.targets, Phase(options, "verify"));
  }
  report.verified = report.mismatch.empty();
  if (options.measure_memcpy) {
    report.memcpy_gbps = internal::MeasureMemcpyGbps(
        std::min<uint64_t>(report.bytes, uint64_t{256} << 20), options.threads);
  }
  return report;
}

// The run RunSelfTest was asked for, its kind not yet in the report.
Result<SelfTestReport> RunSelfTestOfKind(const WeightPlacementManifest& source,
                                         const WeightPlacementManifest& target,
                                         const SelfTestOptions& options) {
  if ((options.delta || options.change_fraction != 1.0) &&
      (!options.via_store.empty() || options.transport == "local")) {
    return Status::InvalidArgument(
        "delta updates and change fractions need a live session (transport "
        "ucx or inproc, with updates)");
  }
  if (!options.via_store.empty()) {
    return internal::RunStoreSelfTest(source, target, options);
  }
  if (options.transport == "ucx" || options.transport == "inproc") {
    return internal::RunLiveSelfTest(source, target, options);
  }
  if (options.transport != "local") {
    return Status::Unimplemented("transport \"" + options.transport +
                                 "\" is not available for the self-test");
  }
  return RunLocalSelfTest(source, target, options);
}

}  // namespace

double SelfTestGbps(const SelfTestReport& r) {
  return r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0;
}

std::vector<double> SelfTestFixedSeconds(const SelfTestReport& r) {
  std::vector<double> out;
  for (double u : r.update_seconds) out.push_back(std::max(0.0, u - r.seconds));
  return out;
}

Result<SelfTestReport> RunSelfTest(const WeightPlacementManifest& source,
                                   const WeightPlacementManifest& target,
                                   const SelfTestOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(SelfTestReport report,
                           RunSelfTestOfKind(source, target, options));
  report.transport = options.via_store.empty() ? options.transport : "store";
  report.procs = options.procs;
  report.updates = options.updates;
  report.delta = options.delta;
  return report;
}

}  // namespace reshard
