#include "selftest/store_selftest.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reshard/api.h"
#include "reshard/plan.h"
#include "reshard/weight_store.h"
#include "selftest/converted_pattern.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"

namespace reshard::internal {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Uploads every source binding's fragments and commits the revision.
Result<UploadPlan> UploadAndCommit(WeightStore& store,
                                   const WeightPlacementManifest& source,
                                   const CheckedBindings& bindings) {
  RESHARD_ASSIGN_OR_RETURN(auto upload, store.PrepareUpload(source, bindings));
  RESHARD_ASSIGN_OR_RETURN(auto receipts,
                           store.Upload(upload, source, bindings));
  RESHARD_RETURN_NOT_OK(store.Commit(upload, receipts));
  return upload;
}

// Checks every target byte and the loaded byte count against the plan.
Status VerifyLoad(const StoredWeightManifest& manifest,
                  const WeightPlacementManifest& source,
                  const WeightPlacementManifest& target,
                  const std::unordered_map<std::string_view, uint64_t>& tensors,
                  const HostBuffers& dst, const SelfTestOptions& options,
                  SelfTestReport* report) {
  if (options.convert) {
    // The load converted: every target byte against the pattern converted
    // (the byte count is the revision's dtype, not the plan's).
    RESHARD_ASSIGN_OR_RETURN(
        auto check,
        ConvertedPatternCheck::Make(source, target, options.fp8_block, dst));
    report->mismatch = check->Verify(tensors, 0);
    report->verified = report->mismatch.empty();
    return Status::OK();
  }
  RESHARD_ASSIGN_OR_RETURN(
      auto plan, LogicalTransferPlan::MakeFromStored(manifest, target));
  report->segments = plan.summary().segments;
  report->mismatch = VerifyPattern(target, tensors, dst);
  report->verified = report->mismatch.empty();
  if (report->verified && report->bytes != plan.summary().bytes) {
    report->verified = false;
    report->mismatch = "loaded " + std::to_string(report->bytes) +
                       " bytes, the plan moves " +
                       std::to_string(plan.summary().bytes);
  }
  return Status::OK();
}

}  // namespace

Result<SelfTestReport> RunStoreSelfTest(const WeightPlacementManifest& source,
                                        const WeightPlacementManifest& target,
                                        const SelfTestOptions& options) {
  SelfTestReport report;
  RESHARD_ASSIGN_OR_RETURN(HostBuffers src,
                           AllocateHostBuffers(source, "selftest-source"));
  RESHARD_ASSIGN_OR_RETURN(HostBuffers dst,
                           AllocateHostBuffers(target, "selftest-target"));
  const auto tensors = TensorIndex(source);
  FillPattern(source, tensors, src);
  for (const auto& [id, p] : dst.data) {
    std::memset(p, 0xD7, target.FindFragment(id)->nbytes());
  }
  // Setup (allocation, pattern) is not timed; planning happens inside the
  // upload (PrepareUpload) and the load (MakeFromStored), timed there.
  auto t0 = Clock::now();
  // A namespace of its own per run: the revision is removed afterwards and
  // never meets another run's.
  WeightStoreOptions store_options;
  store_options.namespace_ =
      "selftest-" + std::to_string(::getpid()) + "-" +
      std::to_string(Clock::now().time_since_epoch().count());
  store_options.convert = options.convert;
  store_options.fp8_block = options.fp8_block;
  RESHARD_ASSIGN_OR_RETURN(auto store,
                           WeightStore::Open(options.via_store, store_options));
  report.plan_seconds = SecondsSince(t0);

  t0 = Clock::now();
  // With convert, FP8 targets quantize before the upload where the
  // source's fragments hold whole blocks (the revision holds them in FP8);
  // the load converts the rest.
  ConversionOptions quantize;
  quantize.block = options.fp8_block;
  RESHARD_ASSIGN_OR_RETURN(
      auto q,
      SourceQuantization::Make(source, options.convert ? target : source,
                               src.bindings, quantize));
  RESHARD_RETURN_NOT_OK(q.Quantize(options.threads));
  // The bindings checked when bound, or the quantized ones (of another
  // placement) checked once here.
  RESHARD_ASSIGN_OR_RETURN(
      CheckedBindings upload_bindings,
      q.quantizes() ? CheckedBindings::Make(q.placement(), q.bindings(),
                                            BindingCoverage::kSubset)
                    : Result<CheckedBindings>(*src.checked));
  RESHARD_ASSIGN_OR_RETURN(
      auto upload, UploadAndCommit(store, q.placement(), upload_bindings));
  report.upload_seconds = SecondsSince(t0);

  t0 = Clock::now();
  RESHARD_ASSIGN_OR_RETURN(
      auto manifest, store.ReadManifest(upload.manifest().manifest_key()));
  auto loaded = store.Load(manifest, target, *dst.checked);
  report.load_seconds = SecondsSince(t0);
  report.seconds = report.upload_seconds + report.load_seconds;
  const Status removed = options.keep_revision
                             ? Status::OK()
                             : store.Remove(manifest.manifest_key());
  RESHARD_RETURN_NOT_OK(loaded.status());
  RESHARD_RETURN_NOT_OK(removed.WithContext("removing the self-test revision"));
  report.bytes = loaded->bytes;
  report.operations = loaded->regions;
  RESHARD_RETURN_NOT_OK(
      VerifyLoad(manifest, source, target, tensors, dst, options, &report));
  if (options.measure_memcpy) {
    report.memcpy_gbps = MeasureMemcpyGbps(
        std::min<uint64_t>(report.bytes, uint64_t{256} << 20), 1);
  }
  return report;
}

}  // namespace reshard::internal
