// WeightStore::Load: a committed revision + target placement -> the shared
// ranged loader (store/ranged_load.h), every delivered chunk verified
// against its checksum record, under a lease.

#include <algorithm>
#include <thread>

#include "reshard/api.h"
#include "reshard/weight_store.h"
#include "store/converting_load.h"
#include "store/device_staging.h"
#include "store/keys.h"
#include "store/lease.h"
#include "store/ranged_load.h"

namespace reshard {
namespace {

// The target is a placement of the stored revision.
Status CheckLoadRevision(const StoredWeightManifest& manifest,
                         const WeightPlacementManifest& target) {
  if (manifest.resource_id() != target.resource_id() ||
      manifest.revision() != target.revision()) {
    return Status::InvalidArgument(
        "target placement revision mismatch: stored " + manifest.resource_id() +
        "@" + manifest.revision() + ", target " + target.resource_id() + "@" +
        target.revision());
  }
  return Status::OK();
}

Status CheckLoadIdentity(const StoredWeightManifest& manifest,
                         const WeightPlacementManifest& target,
                         const CheckedBindings& target_bindings) {
  RESHARD_RETURN_NOT_OK(CheckLoadRevision(manifest, target));
  return target_bindings.RequireFor(target).WithContext("target bindings");
}

// The revision's tensors as a conversion source.
SourceTensorLookup StoredTensorLookup(const StoredWeightManifest& manifest) {
  return [&manifest](std::string_view id) -> std::optional<SourceTensorInfo> {
    const TensorDescriptor* t = manifest.FindTensor(id);
    if (t == nullptr) return std::nullopt;
    return SourceTensorInfo{t->global_shape(), t->dtype(),
                            t->layout_fingerprint()};
  };
}

}  // namespace

Result<LoadReport> WeightStore::Load(
    const StoredWeightManifest& manifest, const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) {
  RESHARD_RETURN_NOT_OK(CheckLoadRevision(manifest, target));
  auto checked =
      CheckedBindings::Make(target, target_bindings, BindingCoverage::kSubset);
  if (!checked.ok()) return checked.status().WithContext("target bindings");
  return Load(manifest, target, *checked);
}

Result<LoadReport> WeightStore::Load(const StoredWeightManifest& manifest,
                                     const WeightPlacementManifest& target,
                                     const CheckedBindings& checked) {
  RESHARD_RETURN_NOT_OK(CheckLoadIdentity(manifest, target, checked));
  const auto& target_bindings = checked.bindings();
  // CUDA targets need a device to stage into: refused before the lease.
  RESHARD_ASSIGN_OR_RETURN(
      std::shared_ptr<cuda::DeviceApi> device,
      internal::DeviceApiFor(target_bindings, "store load", "target",
                             options_.device_api));
  // One participant at a time: a part holds some of the revision's
  // tensors, which only a participant's plan allows.
  const internal::PartLoad by_participant =
      [&](const WeightPlacementManifest& part,
          const CheckedBindings& bindings) -> Result<LoadReport> {
    LoadReport total;
    for (const auto& b : bindings.bindings()) {
      RESHARD_ASSIGN_OR_RETURN(LoadReport one,
                               LoadUnconverted(manifest, part, {b}));
      internal::AddLoadReport(one, &total);
    }
    return total;
  };
  bool converts = false;
  for (const TensorDescriptor& t : target.tensors()) {
    const TensorDescriptor* s = manifest.FindTensor(t.tensor_id());
    converts |= s != nullptr && s->dtype() != t.dtype();
  }
  if (converts && options_.convert) {
    RESHARD_ASSIGN_OR_RETURN(
        auto conversion,
        ConversionPlan::Make(StoredTensorLookup(manifest), target,
                             ConversionOptions{options_.fp8_block}));
    return internal::LoadConverting(
        conversion, target_bindings, options_.convert_staging_bytes,
        std::clamp(std::thread::hardware_concurrency(), 1u, 8u),
        by_participant);
  }
  if (device != nullptr) {
    return internal::LoadThroughDeviceStaging(
        target, target_bindings, std::move(device),
        options_.device_staging_bytes, by_participant);
  }
  return LoadUnconverted(manifest, target, target_bindings);
}

Result<LoadReport> WeightStore::LoadUnconverted(
    const StoredWeightManifest& manifest, const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) {
  const internal::RevisionKeys keys(manifest.group_id());
  RESHARD_ASSIGN_OR_RETURN(internal::Lease lease,
                           internal::Lease::Take(*backend_, keys, options_));
  // The revision must be the committed one (and still there, under lease).
  auto committed = ReadManifest(manifest.manifest_key());
  if (!committed.ok()) {
    return Status::FailedPrecondition("weight manifest is not committed: " +
                                      manifest.manifest_key());
  }
  if (committed->manifest_digest() != manifest.manifest_digest()) {
    return Status::FailedPrecondition(
        "committed weight manifest differs from load plan: " +
        manifest.manifest_key());
  }
  internal::RangedLoadOptions load;
  load.max_range_bytes = options_.max_range_bytes;
  load.max_ranges_per_request = options_.max_ranges_per_request;
  load.staging_bytes = options_.staging_bytes;
  load.min_scatter_bytes = options_.min_scatter_bytes;
  load.staged_window_bytes = options_.staged_window_bytes;
  load.progress = options_.progress;
  load.chunk_sums = [&](const StoredFragment& s) {
    return internal::ReadChunkSums(*backend_, keys, s);
  };
  return internal::RangedLoad(*backend_, manifest, target, target_bindings,
                              load);
}

}  // namespace reshard
