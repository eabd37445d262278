#include "live/shadow_targets.h"

#include <cstring>
#include <utility>

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

Result<WeightRuntimeBindingManifest> ShadowTargets::ShadowOf(
    const WeightRuntimeBindingManifest& b,
    std::map<std::pair<uint64_t, uint64_t>, uint8_t*>& by_range) {
  std::vector<RuntimeBindingFragment> fragments;
  for (const auto& f : b.fragments()) {
    const auto range = std::make_pair(f.address(), f.nbytes());
    uint8_t*& shadow = by_range[range];
    if (shadow == nullptr) {
      auto& owned = shadows_[f.placement_fragment_id()];
      if (owned == nullptr) {
        owned = std::make_unique<uint8_t[]>(f.nbytes());
      }
      shadow = owned.get();
      flips_.push_back(
          {reinterpret_cast<uint8_t*>(f.address()), shadow, f.nbytes()});
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

void ShadowTargets::Flip() const {
  for (const ShadowCopy& f : flips_) {
    std::memcpy(f.serving, f.shadow, f.bytes);
  }
}

}  // namespace reshard::live_internal
