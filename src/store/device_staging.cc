#include "store/device_staging.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "bind/binding_copy.h"
#include "exec_cuda/fragment_staging.h"

namespace reshard::internal {
namespace {

using Bindings = std::vector<WeightRuntimeBindingManifest>;
using TensorSet = std::set<std::string, std::less<>>;

bool IsCuda(const RuntimeBindingFragment& f) {
  auto kind = MemoryKindOfDevice(f.device());
  return kind.ok() && *kind == MemoryKind::kCuda;
}

// One group: the caller's bindings of `part`, CUDA fragments replaced by
// pinned staging, loaded, then copied to the devices.
Status LoadGroup(const WeightPlacementManifest& target, const Bindings& all,
                 const TensorSet& tensors, cuda::FragmentStaging& staging,
                 const PartLoad& load, LoadReport* report) {
  RESHARD_ASSIGN_OR_RETURN(WeightPlacementManifest part,
                           PartOf(target, tensors));
  std::vector<cuda::PinnedBuffer> pinned;
  std::vector<std::pair<const RuntimeBindingFragment*, uint8_t*>> to_device;
  Bindings bindings;
  for (const auto& b : all) {
    std::vector<RuntimeBindingFragment> fragments;
    for (const RuntimeBindingFragment& f : b.fragments()) {
      if (part.FindFragment(f.placement_fragment_id()) == nullptr) continue;
      if (!IsCuda(f)) {
        fragments.push_back(f);
        continue;
      }
      RESHARD_ASSIGN_OR_RETURN(
          cuda::PinnedBuffer buffer,
          cuda::PinnedBuffer::Make(staging.api(), f.nbytes()));
      RESHARD_ASSIGN_OR_RETURN(auto staged,
                               cuda::HostStagingFragment(f, buffer.data()));
      fragments.push_back(std::move(staged));
      to_device.emplace_back(&f, buffer.data());
      pinned.push_back(std::move(buffer));
    }
    if (fragments.empty()) continue;
    RESHARD_ASSIGN_OR_RETURN(auto made,
                             RebuiltBinding(b, part, std::move(fragments)));
    bindings.push_back(std::move(made));
  }
  if (bindings.empty()) return Status::OK();
  auto checked = CheckedBindings::Make(part, std::move(bindings),
                                       BindingCoverage::kSubset);
  if (!checked.ok()) return checked.status().WithContext("target bindings");
  RESHARD_ASSIGN_OR_RETURN(LoadReport loaded, load(part, *checked));
  AddLoadReport(loaded, report);
  for (const auto& [f, host] : to_device) {
    RESHARD_RETURN_NOT_OK(staging.ToFragment(host, *f).WithContext(
        "copying target fragment " + f->placement_fragment_id() +
        " to the device"));
  }
  return Status::OK();
}

}  // namespace

Result<std::shared_ptr<cuda::DeviceApi>> DeviceApiFor(
    const Bindings& bindings, std::string_view path, std::string_view side,
    const std::shared_ptr<cuda::DeviceApi>& injected) {
  for (const auto& b : bindings) {
    for (const RuntimeBindingFragment& f : b.fragments()) {
      if (!IsCuda(f)) continue;
      auto api = cuda::StagingDeviceApi(injected);
      if (api.ok()) return api;
      const Status host_only = RequireMemoryKind(f, {MemoryKind::kHost}, path,
                                                 side, b.participant_id());
      return Status::FailedPrecondition(host_only.message() + "; " +
                                        api.status().message());
    }
  }
  return std::shared_ptr<cuda::DeviceApi>();
}

Result<LoadReport> LoadThroughDeviceStaging(
    const WeightPlacementManifest& target, const Bindings& bindings,
    std::shared_ptr<cuda::DeviceApi> api, uint64_t staging_budget,
    const PartLoad& load) {
  std::map<std::string, uint64_t, std::less<>> cuda_bytes;  // by tensor
  for (const auto& b : bindings) {
    for (const RuntimeBindingFragment& f : b.fragments()) {
      const PlacementFragment* p =
          target.FindFragment(f.placement_fragment_id());
      if (p != nullptr && IsCuda(f)) cuda_bytes[p->tensor_id()] += f.nbytes();
    }
  }
  cuda::FragmentStaging staging(std::move(api));
  LoadReport report;
  TensorSet group;
  uint64_t group_bytes = 0;
  for (const TensorDescriptor& t : target.tensors()) {
    const uint64_t bytes = cuda_bytes[t.tensor_id()];
    if (!group.empty() && group_bytes + bytes > staging_budget) {
      RESHARD_RETURN_NOT_OK(
          LoadGroup(target, bindings, group, staging, load, &report));
      group.clear();
      group_bytes = 0;
    }
    group.insert(t.tensor_id());
    group_bytes += bytes;
  }
  if (!group.empty()) {
    RESHARD_RETURN_NOT_OK(
        LoadGroup(target, bindings, group, staging, load, &report));
  }
  return report;
}

UploadStaging::UploadStaging(std::shared_ptr<cuda::DeviceApi> api) {
  if (api != nullptr) {
    staging_ = std::make_unique<cuda::FragmentStaging>(std::move(api));
  }
}

UploadStaging::~UploadStaging() = default;

Result<const uint8_t*> UploadStaging::Host(const RuntimeBindingFragment& f) {
  if (!IsCuda(f)) return reinterpret_cast<const uint8_t*>(f.address());
  if (staging_ == nullptr) {
    return Status::FailedPrecondition("no device staging for source fragment " +
                                      f.placement_fragment_id());
  }
  if (buffer_ == nullptr || buffer_->size() < f.nbytes()) {
    buffer_.reset();  // the old staging goes before the larger one comes
    RESHARD_ASSIGN_OR_RETURN(
        cuda::PinnedBuffer made,
        cuda::PinnedBuffer::Make(staging_->api(), f.nbytes()));
    buffer_ = std::make_unique<cuda::PinnedBuffer>(std::move(made));
  }
  RESHARD_RETURN_NOT_OK(staging_->FromFragment(f, buffer_->data())
                            .WithContext("copying source fragment " +
                                         f.placement_fragment_id() +
                                         " from the device"));
  return buffer_->data();
}

}  // namespace reshard::internal
