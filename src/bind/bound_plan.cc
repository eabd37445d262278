// BoundTransferPlan::Bind: logical plan + runtime bindings -> absolute regions.

#include "reshard/bound_plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace reshard {

// What execution must find unchanged: per used participant of each side,
// the binding's identity and the used fragments' physical views.
struct BindingSnapshot {
  std::string participant_id;
  std::string instance_id;
  uint64_t generation = 0;
  std::string lease_id;
  std::vector<RuntimeBindingFragment> fragments;  // used ones, sorted
};

struct BoundTransferPlan::State {
  std::vector<BoundRegion> regions;
  uint64_t bytes = 0;
  std::vector<BindingSnapshot> sources;
  std::vector<BindingSnapshot> targets;
  // What Bind was given, for Rebind.
  std::optional<CheckedBindings> source_bindings;
  std::optional<CheckedBindings> target_bindings;
};

namespace {

// Snapshots of the bindings whose fragments are in `used`.
std::vector<BindingSnapshot> Snapshot(
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    const std::unordered_set<std::string_view>& used) {
  std::vector<BindingSnapshot> out;
  for (const auto& b : bindings) {
    BindingSnapshot snap{
        b.participant_id(), b.instance_id(), b.generation(), b.lease_id(), {}};
    for (const auto& f : b.fragments()) {
      if (used.count(f.placement_fragment_id())) snap.fragments.push_back(f);
    }
    if (!snap.fragments.empty()) out.push_back(std::move(snap));
  }
  return out;
}

Status CheckSide(const std::vector<BindingSnapshot>& planned,
                 const std::vector<WeightRuntimeBindingManifest>& current,
                 std::string_view side,
                 const std::vector<std::string>* scope = nullptr) {
  std::unordered_map<std::string_view, const WeightRuntimeBindingManifest*>
      by_participant;
  for (const auto& b : current) by_participant[b.participant_id()] = &b;
  for (const BindingSnapshot& snap : planned) {
    if (scope != nullptr && std::find(scope->begin(), scope->end(),
                                      snap.participant_id) == scope->end()) {
      continue;
    }
    auto it = by_participant.find(snap.participant_id);
    if (it == by_participant.end()) {
      return Status::FailedPrecondition(
          "acquired " + std::string(side) +
          " runtime binding is missing for participant " + snap.participant_id +
          " (lease revoked?)");
    }
    const WeightRuntimeBindingManifest& b = *it->second;
    auto differs = [&](const char* field, const std::string& planned_value,
                       const std::string& current_value) {
      return Status::FailedPrecondition(
          std::string("acquired runtime binding ") + field +
          " differs from plan: " + std::string(side) + " participant " +
          snap.participant_id + ": planned " + planned_value + ", current " +
          current_value);
    };
    if (b.instance_id() != snap.instance_id) {
      return differs("instance_id", snap.instance_id, b.instance_id());
    }
    if (b.generation() != snap.generation) {
      return differs("generation", std::to_string(snap.generation),
                     std::to_string(b.generation()));
    }
    if (b.lease_id() != snap.lease_id) {
      return differs("lease_id", snap.lease_id, b.lease_id());
    }
    for (const RuntimeBindingFragment& f : snap.fragments) {
      const RuntimeBindingFragment* now =
          b.FindFragment(f.placement_fragment_id());
      if (now == nullptr || !(*now == f)) {
        return Status::FailedPrecondition(
            "stale " + std::string(side) +
            " fragment: " + f.placement_fragment_id());
      }
    }
  }
  return Status::OK();
}

struct Bound {
  const RuntimeBindingFragment* fragment;
  const WeightRuntimeBindingManifest* binding;
};

// placement_fragment_id -> its runtime view, across all bindings of a side
// (checked already: only that they were checked for `placement`).
Result<std::unordered_map<std::string_view, Bound>> IndexBindings(
    const WeightPlacementManifest& placement, const CheckedBindings& bindings,
    std::string_view side) {
  auto st = bindings.RequireFor(placement);
  if (!st.ok()) return st.WithContext(std::string(side) + " bindings");
  std::unordered_map<std::string_view, Bound> index;
  for (const auto& b : bindings.bindings()) {
    for (const auto& f : b.fragments()) {
      index.emplace(f.placement_fragment_id(), Bound{&f, &b});
    }
  }
  return index;
}

// The plan was made for these placements.
Status CheckPlanIds(const LogicalTransferPlan& plan,
                    const WeightPlacementManifest& source,
                    const WeightPlacementManifest& target) {
  if (plan.source_placement_id() != source.placement_id()) {
    return Status::InvalidArgument(
        "logical plan and source placement IDs differ");
  }
  if (plan.target_placement_id() != target.placement_id()) {
    return Status::InvalidArgument(
        "logical plan and target placement IDs differ");
  }
  return Status::OK();
}

// Bindings of one side checked once, errors prefixed with the side.
Result<CheckedBindings> CheckSideBindings(
    const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    std::string_view side) {
  auto checked =
      CheckedBindings::Make(placement, bindings, BindingCoverage::kSubset);
  if (!checked.ok()) {
    return checked.status().WithContext(std::string(side) + " bindings");
  }
  return checked;
}

// Rule 53: no source and target storage allocation may overlap in one
// address space (instance, worker, device).
Status CheckNotInPlace(
    const std::unordered_map<std::string_view, Bound>& sources,
    const std::unordered_map<std::string_view, Bound>& targets) {
  using Space =
      std::tuple<std::string_view, std::string_view, std::string_view>;
  struct Range {
    uint64_t begin, end;
    bool target;
    std::string_view id;
  };
  std::map<Space, std::vector<Range>> spaces;
  auto add = [&](const auto& index, bool target) {
    for (const auto& [id, b] : index) {
      const auto& f = *b.fragment;
      spaces[{b.binding->instance_id(), f.worker_id(), f.device()}].push_back(
          {f.storage_address(), f.storage_address() + f.storage_nbytes(),
           target, id});
    }
  };
  add(sources, false);
  add(targets, true);
  for (auto& [space, ranges] : spaces) {
    std::sort(ranges.begin(), ranges.end(),
              [](const auto& a, const auto& b) { return a.begin < b.begin; });
    // Sweep, remembering the furthest-reaching range of each side.
    const Range* reach[2] = {nullptr, nullptr};
    for (const Range& r : ranges) {
      const Range* other = reach[!r.target];
      if (other != nullptr && r.begin < other->end) {
        const Range& s = r.target ? *other : r;
        const Range& t = r.target ? r : *other;
        return Status::InvalidArgument(
            "source and target runtime storage allocations overlap (source " +
            std::string(s.id) + ", target " + std::string(t.id) +
            "); in-place reshard is unsupported");
      }
      const Range*& mine = reach[r.target];
      if (mine == nullptr || r.end > mine->end) mine = &r;
    }
  }
  return Status::OK();
}

// Rule 54: two target views may share bytes only as an exact declared
// alias (ValidateRuntimeBindings already rejects anything else). Such a
// pair is written twice, which is only sound when the source declares the
// same alias group for both tensors (so their bytes are the same weight),
// the source is a live placement, and both views share one lease scope.
Status CheckTargetAliases(
    const std::unordered_map<std::string_view, Bound>& targets,
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target) {
  using Key = std::tuple<std::string_view, std::string_view, std::string_view,
                         uint64_t, uint64_t>;
  std::map<Key, std::vector<const Bound*>> ranges;
  for (const auto& [id, b] : targets) {
    const auto& f = *b.fragment;
    ranges[{b.binding->instance_id(), f.worker_id(), f.device(), f.address(),
            f.nbytes()}]
        .push_back(&b);
  }
  std::unordered_map<std::string_view, const std::vector<std::string>*>
      source_groups;
  for (const PlacementFragment* f : source.fragments()) {
    source_groups.emplace(f->tensor_id(), &f->aliases());
  }
  for (auto& [key, views] : ranges) {
    if (views.size() < 2) continue;
    std::sort(views.begin(), views.end(), [](const Bound* a, const Bound* b) {
      return a->fragment->placement_fragment_id() <
             b->fragment->placement_fragment_id();
    });
    const Bound& first = *views.front();
    for (const Bound* v : views) {
      const std::string& id = v->fragment->placement_fragment_id();
      const PlacementFragment* logical = target.FindFragment(id);
      auto group = source_groups.find(logical->tensor_id());
      if (group == source_groups.end() || group->second->size() < 2 ||
          *group->second != logical->aliases()) {
        return Status::InvalidArgument(
            "conflicting target physical range: " + id +
            " (aliased target views need the same alias group on the "
            "source)");
      }
      if (v->binding->lease_id() != first.binding->lease_id() ||
          v->binding->generation() != first.binding->generation()) {
        return Status::InvalidArgument(
            "conflicting target physical range: " + id +
            " (aliased target views in different lease scopes)");
      }
    }
  }
  return Status::OK();
}

}  // namespace

Result<BoundTransferPlan> BoundTransferPlan::Bind(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) {
  RESHARD_RETURN_NOT_OK(CheckPlanIds(plan, source, target));
  RESHARD_ASSIGN_OR_RETURN(
      CheckedBindings sources,
      CheckSideBindings(source, source_bindings, "source"));
  RESHARD_ASSIGN_OR_RETURN(
      CheckedBindings targets,
      CheckSideBindings(target, target_bindings, "target"));
  return Bind(plan, source, sources, target, targets);
}

Result<BoundTransferPlan> BoundTransferPlan::Rebind(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) const {
  auto sources = state_->source_bindings->Replace(source, source_bindings);
  if (!sources.ok()) return sources.status().WithContext("source bindings");
  auto targets = state_->target_bindings->Replace(target, target_bindings);
  if (!targets.ok()) return targets.status().WithContext("target bindings");
  return Bind(plan, source, *sources, target, *targets);
}

Result<BoundTransferPlan> BoundTransferPlan::Bind(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const CheckedBindings& source_bindings,
    const WeightPlacementManifest& target,
    const CheckedBindings& target_bindings) {
  RESHARD_RETURN_NOT_OK(CheckPlanIds(plan, source, target));
  RESHARD_ASSIGN_OR_RETURN(auto sources,
                           IndexBindings(source, source_bindings, "source"));
  RESHARD_ASSIGN_OR_RETURN(auto targets,
                           IndexBindings(target, target_bindings, "target"));
  RESHARD_RETURN_NOT_OK(CheckNotInPlace(sources, targets));
  RESHARD_RETURN_NOT_OK(CheckTargetAliases(targets, source, target));
  auto state = std::make_shared<State>();
  auto* regions = &state->regions;
  regions->reserve(plan.regions().size());
  uint64_t& bytes = state->bytes;
  std::unordered_set<std::string_view> used_sources;
  std::unordered_set<std::string_view> used_targets;
  const auto& sfr = plan.source_fragments();
  const auto& tfr = plan.target_fragments();
  for (uint32_t i = 0; i < plan.regions().size(); ++i) {
    const TransferRegion& r = plan.regions()[i];
    const std::string_view sid = sfr[r.source_fragment].fragment_id;
    const std::string_view tid = tfr[r.target_fragment].fragment_id;
    auto s = sources.find(sid);
    if (s == sources.end()) {
      return Status::InvalidArgument(
          "missing source runtime binding for placement fragment: " +
          std::string(sid));
    }
    auto t = targets.find(tid);
    if (t == targets.end()) {
      return Status::InvalidArgument(
          "missing runtime binding for placement fragment: " +
          std::string(tid));
    }
    used_sources.insert(sid);
    used_targets.insert(tid);
    regions->push_back({s->second.fragment->address() + r.source_base_offset,
                        t->second.fragment->address() + r.target_base_offset,
                        r.inner_bytes, r.loops, r.bytes, i});
    bytes += r.bytes;
  }
  state->sources = Snapshot(source_bindings.bindings(), used_sources);
  state->targets = Snapshot(target_bindings.bindings(), used_targets);
  state->source_bindings = source_bindings;
  state->target_bindings = target_bindings;
  return BoundTransferPlan(std::move(state));
}

const std::vector<BoundRegion>& BoundTransferPlan::regions() const {
  return state_->regions;
}

uint64_t BoundTransferPlan::bytes() const { return state_->bytes; }

Status BoundTransferPlan::CheckCurrent(
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) const {
  RESHARD_RETURN_NOT_OK(CheckSide(state_->sources, source_bindings, "source"));
  return CheckSide(state_->targets, target_bindings, "target");
}

Status BoundTransferPlan::CheckCurrentFor(
    const std::vector<std::string>& source_scope,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const std::vector<std::string>& target_scope,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) const {
  RESHARD_RETURN_NOT_OK(
      CheckSide(state_->sources, source_bindings, "source", &source_scope));
  return CheckSide(state_->targets, target_bindings, "target", &target_scope);
}

namespace {

Status RequireMemoryKindsOf(const std::vector<BindingSnapshot>& side,
                            std::string_view side_name,
                            const std::vector<MemoryKind>& supported,
                            std::string_view executor) {
  for (const BindingSnapshot& snap : side) {
    for (const RuntimeBindingFragment& f : snap.fragments) {
      RESHARD_RETURN_NOT_OK(RequireMemoryKind(f, supported, executor, side_name,
                                              snap.participant_id));
    }
  }
  return Status::OK();
}

}  // namespace

Status BoundTransferPlan::RequireMemoryKinds(
    const std::vector<MemoryKind>& supported, std::string_view executor) const {
  RESHARD_RETURN_NOT_OK(
      RequireMemoryKindsOf(state_->sources, "source", supported, executor));
  return RequireMemoryKindsOf(state_->targets, "target", supported, executor);
}

}  // namespace reshard
