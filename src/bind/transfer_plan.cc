// TransferPlan::Bind: logical plan + runtime bindings -> absolute regions.

#include "reshard/transfer_plan.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

namespace reshard {
namespace {

struct Bound {
  const RuntimeBindingFragment* fragment;
  const WeightRuntimeBindingManifest* binding;
};

// placement_fragment_id -> its runtime view, across all bindings of a side.
Result<std::unordered_map<std::string_view, Bound>> IndexBindings(
    const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    std::string_view side) {
  auto st = ValidateRuntimeBindings(placement, bindings, /*require_all=*/false);
  if (!st.ok()) return st.WithContext(std::string(side) + " bindings");
  std::unordered_map<std::string_view, Bound> index;
  for (const auto& b : bindings) {
    for (const auto& f : b.fragments()) {
      index.emplace(f.placement_fragment_id(), Bound{&f, &b});
    }
  }
  return index;
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

}  // namespace

Result<TransferPlan> TransferPlan::Bind(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) {
  if (plan.source_placement_id() != source.placement_id()) {
    return Status::InvalidArgument(
        "logical plan and source placement IDs differ");
  }
  if (plan.target_placement_id() != target.placement_id()) {
    return Status::InvalidArgument(
        "logical plan and target placement IDs differ");
  }
  ASSIGN_OR_RETURN(auto sources,
                   IndexBindings(source, source_bindings, "source"));
  ASSIGN_OR_RETURN(auto targets,
                   IndexBindings(target, target_bindings, "target"));
  RETURN_NOT_OK(CheckNotInPlace(sources, targets));
  auto regions = std::make_shared<std::vector<BoundRegion>>();
  regions->reserve(plan.regions().size());
  uint64_t bytes = 0;
  const auto& sfr = plan.source_fragments();
  const auto& tfr = plan.target_fragments();
  for (uint32_t i = 0; i < plan.regions().size(); ++i) {
    const TransferRegion& r = plan.regions()[i];
    const std::string& sid = sfr[r.source_fragment].fragment_id;
    const std::string& tid = tfr[r.target_fragment].fragment_id;
    auto s = sources.find(sid);
    if (s == sources.end()) {
      return Status::InvalidArgument(
          "missing source runtime binding for placement fragment: " + sid);
    }
    auto t = targets.find(tid);
    if (t == targets.end()) {
      return Status::InvalidArgument(
          "missing runtime binding for placement fragment: " + tid);
    }
    regions->push_back({s->second.fragment->address() + r.source_base_offset,
                        t->second.fragment->address() + r.target_base_offset,
                        r.inner_bytes, r.loops, r.bytes, i});
    bytes += r.bytes;
  }
  return TransferPlan(std::move(regions), bytes);
}

}  // namespace reshard
