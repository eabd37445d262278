// CheckedBindings: bindings checked once against their placement (rules
// 29-38, 50), carried with that proof to every consumer.

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "contract/binding_checks.h"
#include "reshard/binding.h"

namespace reshard {

struct CheckedBindings::State {
  std::string placement_id;
  std::string placement_digest;
  BindingCoverage coverage = BindingCoverage::kEveryOwner;
  std::vector<WeightRuntimeBindingManifest> bindings;
};

namespace {

using internal::BindingView;

// Every field a check reads; the fragments' owners are ignored.
bool SameBinding(const WeightRuntimeBindingManifest& a,
                 const WeightRuntimeBindingManifest& b) {
  return a.resource_id() == b.resource_id() &&
         a.placement_id() == b.placement_id() &&
         a.placement_digest() == b.placement_digest() &&
         a.instance_id() == b.instance_id() &&
         a.generation() == b.generation() && a.lease_id() == b.lease_id() &&
         a.revision() == b.revision() &&
         a.participant_id() == b.participant_id() &&
         a.fragments() == b.fragments();
}

// The views of a binding checked before (its fragments are exactly its
// participant's, in the same order), for the cross-binding address rules.
void AppendCheckedViews(const WeightPlacementManifest& placement,
                        const WeightRuntimeBindingManifest& b,
                        std::vector<BindingView>* views) {
  const auto& logical = placement.FindPart(b.participant_id())->fragments();
  for (size_t i = 0; i < logical.size(); ++i) {
    views->push_back({&b.instance_id(), &b.fragments()[i], &logical[i]});
  }
}

// Rules 50 and 37 for one binding of a set.
Status CheckMember(const WeightPlacementManifest& placement,
                   const WeightRuntimeBindingManifest& b,
                   std::unordered_set<std::string_view>* seen) {
  // Rule 50: bindings are only for participants that own fragments.
  const WeightPlacementPart* part = placement.FindPart(b.participant_id());
  if (part != nullptr && part->fragments().empty()) {
    return Status::InvalidArgument(
        "unknown runtime binding participant: " + b.participant_id() +
        " owns no fragments and needs no binding");
  }
  if (!seen->insert(b.participant_id()).second) {
    return Status::InvalidArgument("duplicate runtime binding participant: " +
                                   b.participant_id());
  }
  return Status::OK();
}

Status CheckCoverage(const WeightPlacementManifest& placement,
                     const std::unordered_set<std::string_view>& seen,
                     BindingCoverage coverage) {
  if (coverage != BindingCoverage::kEveryOwner) return Status::OK();
  for (const auto& part : placement.parts()) {
    if (!part.fragments().empty() && !seen.count(part.participant_id())) {
      return Status::InvalidArgument("missing runtime binding participant: " +
                                     part.participant_id());
    }
  }
  return Status::OK();
}

// The set rules over `bindings`, and rules 30-36 for those `fresh` marks
// (the others were checked before, for this placement).
Status CheckSet(const WeightPlacementManifest& placement,
                const std::vector<WeightRuntimeBindingManifest>& bindings,
                const std::vector<bool>& fresh, BindingCoverage coverage) {
  std::vector<BindingView> views;
  std::unordered_set<std::string_view> seen;
  std::unordered_set<std::string_view> runtime_ids;
  for (size_t i = 0; i < bindings.size(); ++i) {
    const WeightRuntimeBindingManifest& b = bindings[i];
    RESHARD_RETURN_NOT_OK(CheckMember(placement, b, &seen));
    if (fresh[i]) {
      RESHARD_RETURN_NOT_OK(internal::CheckBinding(placement, b, &views));
    } else {
      AppendCheckedViews(placement, b, &views);
    }
    for (const auto& f : b.fragments()) {
      if (!runtime_ids.insert(f.runtime_fragment_id()).second) {
        return Status::InvalidArgument(
            "duplicate runtime fragment_id across participants: " +
            f.runtime_fragment_id());
      }
    }
  }
  RESHARD_RETURN_NOT_OK(CheckCoverage(placement, seen, coverage));
  return internal::CheckAddressRanges(placement, &views);
}

}  // namespace

Result<CheckedBindings> CheckedBindings::Make(
    const WeightPlacementManifest& placement,
    std::vector<WeightRuntimeBindingManifest> bindings,
    BindingCoverage coverage) {
  RESHARD_RETURN_NOT_OK(CheckSet(
      placement, bindings, std::vector<bool>(bindings.size(), true), coverage));
  return CheckedBindings(std::make_shared<const State>(
      State{placement.placement_id(), placement.digest(), coverage,
            std::move(bindings)}));
}

Result<CheckedBindings> CheckedBindings::Merge(
    const WeightPlacementManifest& placement,
    const std::vector<CheckedBindings>& sets, BindingCoverage coverage) {
  std::vector<WeightRuntimeBindingManifest> bindings;
  for (const CheckedBindings& set : sets) {
    RESHARD_RETURN_NOT_OK(set.RequireFor(placement));
    bindings.insert(bindings.end(), set.bindings().begin(),
                    set.bindings().end());
  }
  RESHARD_RETURN_NOT_OK(CheckSet(placement, bindings,
                                 std::vector<bool>(bindings.size(), false),
                                 coverage));
  return CheckedBindings(std::make_shared<const State>(
      State{placement.placement_id(), placement.digest(), coverage,
            std::move(bindings)}));
}

Result<CheckedBindings> CheckedBindings::Replace(
    const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& now) const {
  RESHARD_RETURN_NOT_OK(RequireFor(placement));
  std::vector<WeightRuntimeBindingManifest> bindings = state_->bindings;
  std::vector<bool> fresh(bindings.size(), false);
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < state_->bindings.size(); ++i) {
    index.emplace(state_->bindings[i].participant_id(), i);
  }
  for (const WeightRuntimeBindingManifest& b : now) {
    auto it = index.find(b.participant_id());
    if (it == index.end()) {
      bindings.push_back(b);
      fresh.push_back(true);
    } else if (!SameBinding(bindings[it->second], b)) {
      bindings[it->second] = b;
      fresh[it->second] = true;
    }
  }
  RESHARD_RETURN_NOT_OK(CheckSet(placement, bindings, fresh, coverage()));
  return CheckedBindings(std::make_shared<const State>(
      State{placement.placement_id(), placement.digest(), coverage(),
            std::move(bindings)}));
}

CheckedBindings CheckedBindings::Only(
    const std::vector<std::string>& participant_ids) const {
  std::vector<WeightRuntimeBindingManifest> bindings;
  for (const auto& b : state_->bindings) {
    if (std::find(participant_ids.begin(), participant_ids.end(),
                  b.participant_id()) != participant_ids.end()) {
      bindings.push_back(b);
    }
  }
  return CheckedBindings(std::make_shared<const State>(
      State{state_->placement_id, state_->placement_digest,
            BindingCoverage::kSubset, std::move(bindings)}));
}

Status CheckedBindings::RequireFor(
    const WeightPlacementManifest& placement) const {
  if (placement.placement_id() == state_->placement_id &&
      placement.digest() == state_->placement_digest) {
    return Status::OK();
  }
  return Status::InvalidArgument(
      "runtime bindings were checked for placement " + state_->placement_id +
      ", not " + placement.placement_id());
}

const std::string& CheckedBindings::placement_id() const {
  return state_->placement_id;
}
const std::string& CheckedBindings::placement_digest() const {
  return state_->placement_digest;
}
BindingCoverage CheckedBindings::coverage() const { return state_->coverage; }
const std::vector<WeightRuntimeBindingManifest>& CheckedBindings::bindings()
    const {
  return state_->bindings;
}

const WeightRuntimeBindingManifest* CheckedBindings::Find(
    std::string_view participant_id) const {
  for (const auto& b : state_->bindings) {
    if (b.participant_id() == participant_id) return &b;
  }
  return nullptr;
}

Status ValidateRuntimeBindings(
    const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    BindingCoverage coverage) {
  return CheckedBindings::Make(placement, bindings, coverage).status();
}

}  // namespace reshard
