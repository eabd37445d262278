#include "live/shadow_targets.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "bind/binding_copy.h"
#include "live/live_world.h"

namespace reshard::live_internal {

Result<std::vector<WeightRuntimeBindingManifest>> ShadowTargets::Shadow(
    const std::vector<WeightRuntimeBindingManifest>& serving) {
  std::vector<WeightRuntimeBindingManifest> kept = serving;
  std::vector<WeightRuntimeBindingManifest> out;
  flips_.clear();
  std::map<std::pair<uint64_t, uint64_t>, uint8_t*> by_range;
  for (const auto& b : kept) {
    RESHARD_ASSIGN_OR_RETURN(auto shadowed, ShadowOf(b, by_range));
    out.push_back(std::move(shadowed));
  }
  serving_ = std::move(kept);
  return out;
}

ShadowTargets::~ShadowTargets() {
  if (api_ == nullptr) return;
  // A flip still queued ends before the shadows are freed.
  (void)streams_->SynchronizeAll();
  for (auto& [id, shadow] : device_shadows_) (void)api_->Free(shadow.first);
}

Result<uint8_t*> ShadowTargets::ShadowBuffer(const RuntimeBindingFragment& f,
                                             int* device) {
  const std::string& id = f.placement_fragment_id();
  auto kind = MemoryKindOfDevice(f.device());
  if (api_ != nullptr && kind.ok() && *kind == MemoryKind::kCuda) {
    auto it = device_shadows_.find(id);
    if (it == device_shadows_.end()) {
      RESHARD_ASSIGN_OR_RETURN(
          cuda::PointerInfo where,
          api_->Pointer(reinterpret_cast<const void*>(f.address())));
      const int on = std::max(where.device, 0);
      RESHARD_ASSIGN_OR_RETURN(
          void* p, api_->Malloc(on, std::max<uint64_t>(f.nbytes(), 1)));
      it = device_shadows_
               .emplace(id, std::make_pair(static_cast<uint8_t*>(p), on))
               .first;
    }
    *device = it->second.second;
    return it->second.first;
  }
  auto& owned = shadows_[id];
  if (owned == nullptr) owned = std::make_unique<uint8_t[]>(f.nbytes());
  *device = -1;
  return owned.get();
}

Result<WeightRuntimeBindingManifest> ShadowTargets::ShadowOf(
    const WeightRuntimeBindingManifest& b,
    std::map<std::pair<uint64_t, uint64_t>, uint8_t*>& by_range) {
  std::vector<RuntimeBindingFragment> fragments;
  for (const auto& f : b.fragments()) {
    const auto range = std::make_pair(f.address(), f.nbytes());
    uint8_t*& shadow = by_range[range];
    if (shadow == nullptr) {
      int device = -1;
      RESHARD_ASSIGN_OR_RETURN(shadow, ShadowBuffer(f, &device));
      flips_.push_back({reinterpret_cast<uint8_t*>(f.address()), shadow,
                        f.nbytes(), device});
    }
    RuntimeBindingFragmentSpec spec = internal::SpecOf(f);
    spec.runtime_fragment_id += ":shadow";
    spec.address = spec.storage_address = reinterpret_cast<uint64_t>(shadow);
    spec.storage_nbytes = f.nbytes();
    spec.storage_offset_bytes = 0;
    RESHARD_ASSIGN_OR_RETURN(auto fragment,
                             RuntimeBindingFragment::Make(std::move(spec)));
    fragments.push_back(std::move(fragment));
  }
  WeightRuntimeBindingManifestSpec spec{
      b.resource_id(), b.placement_id(),   b.placement_digest(),
      b.instance_id(), b.generation(),     b.lease_id(),
      b.revision(),    b.participant_id(), std::move(fragments)};
  return WeightRuntimeBindingManifest::Make(std::move(spec));
}

Status ShadowTargets::SameServing(
    const std::vector<WeightRuntimeBindingManifest>& targets) const {
  RESHARD_RETURN_NOT_OK(SameParticipants(targets, serving_, "target"));
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!SameBinding(targets[i], serving_[i])) {
      return Status::FailedPrecondition(
          "live session " + session_ + ": target participant " +
          targets[i].participant_id() +
          " changed its binding without passing it to Update");
    }
  }
  return Status::OK();
}

Status ShadowTargets::Flip() {
  Status st;
  for (const ShadowCopy& f : flips_) {
    if (f.device < 0) {
      std::memcpy(f.serving, f.shadow, f.bytes);
      continue;
    }
    if (f.bytes == 0) continue;
    Result<cuda::StreamHandle> stream = streams_->Of(f.device);
    if (!stream.ok()) {
      st = stream.status();
      break;
    }
    st = api_->Copy2DAsync(f.serving, f.bytes, f.shadow, f.bytes, f.bytes, 1,
                           cuda::CopyKind::kDeviceToDevice, *stream);
    if (!st.ok()) break;
  }
  if (streams_ != nullptr) st = streams_->SynchronizeAll(std::move(st));
  if (!st.ok()) {
    return st.WithContext("live session " + session_ +
                          ": copying the device shadows into the targets");
  }
  return Status::OK();
}

}  // namespace reshard::live_internal
