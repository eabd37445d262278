// LogicalTransferPlan: its factories (Make from a placement, MakeFromStored
// from a store revision), each source as the planner reads it (PlanSource),
// the regions' canonical order (step 7 of docs/planner.md, made on first
// use) and the accessors.

#include <map>
#include <mutex>
#include <tuple>

#include "plan/planner.h"

namespace reshard {
namespace internal {

// Step 7: (target fragment id, target base offset, source fragment id,
// source base offset), in place.
void OrderRegions(const std::vector<PlanFragment>& sfr,
                  const std::vector<PlanFragment>& tfr,
                  std::vector<TransferRegion>* ordered) {
  std::vector<TransferRegion>& regions = *ordered;
  // The order within one target fragment (the fragment is the bucket).
  struct Key {
    uint64_t target_base;
    uint32_t source_order;
    uint32_t index;
    uint64_t source_base;
  };
  // Target id orders are a permutation of [0, targets): a counting sort
  // buckets the regions by target in linear time, and only each target's
  // few regions are compared (most targets have one). The id orders of both
  // sides as compact columns: regions reach their fragments in random order.
  std::vector<uint32_t> source_order(sfr.size()), target_order(tfr.size());
  for (size_t i = 0; i < sfr.size(); ++i) source_order[i] = sfr[i].order;
  for (size_t i = 0; i < tfr.size(); ++i) target_order[i] = tfr[i].order;
  std::vector<uint32_t> first(tfr.size() + 1, 0);
  for (const auto& r : regions) ++first[target_order[r.target_fragment] + 1];
  for (size_t i = 1; i < first.size(); ++i) first[i] += first[i - 1];
  std::vector<uint32_t> next(first.begin(), first.end() - 1);
  std::vector<Key> keys(regions.size());
  for (uint32_t i = 0; i < regions.size(); ++i) {
    const auto& r = regions[i];
    keys[next[target_order[r.target_fragment]]++] = {
        r.target_base_offset, source_order[r.source_fragment], i,
        r.source_base_offset};
  }
  for (size_t t = 0; t + 1 < first.size(); ++t) {
    if (first[t + 1] - first[t] < 2) continue;
    std::sort(keys.begin() + first[t], keys.begin() + first[t + 1],
              [](const Key& a, const Key& b) {
                return std::tie(a.target_base, a.source_order, a.source_base) <
                       std::tie(b.target_base, b.source_order, b.source_base);
              });
  }
  // Into place, cycle by cycle: region keys[p].index goes to p. A second
  // array of regions would cost as much again in fresh pages as the moves.
  std::vector<uint32_t> from(keys.size());
  for (size_t p = 0; p < keys.size(); ++p) from[p] = keys[p].index;
  keys = {};
  for (uint32_t start = 0; start < from.size(); ++start) {
    if (from[start] == start) continue;
    TransferRegion held = std::move(regions[start]);
    uint32_t p = start;
    while (from[p] != start) {
      const uint32_t q = from[p];
      // The next region to move is a random one: start its miss now.
      __builtin_prefetch(&regions[from[q]]);
      regions[p] = std::move(regions[q]);
      from[p] = p;
      p = q;
    }
    regions[p] = std::move(held);
    from[p] = p;
  }
}

// LogicalTransferPlan::Make without conversions: `target`'s bytes from
// `source`'s, dtypes equal.
Result<LogicalTransferPlan> PlanFromPlacement(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const PlanOptions& options) {
  PlanSource view{source.resource_id(),
                  source.revision(),
                  source.weight_generation(),
                  source.placement_id(),
                  &source,
                  nullptr,
                  {},
                  [&](std::string_view id) { return source.FindTensor(id); },
                  source.fragments().size(),
                  {},
                  source.topology().sizes()};
  for (const auto& t : source.tensors()) view.tensors.push_back(&t);
  view.add_fragments = [&](const internal::PlanTensorIndex& tensor_index,
                           internal::SourceTables out) {
    out.table_index.reserve(source.fragments().size());
    std::vector<uint32_t> part_tensor;
    for (const auto& part : source.parts()) {
      if (part.fragments().empty()) continue;
      const auto pidx = static_cast<uint32_t>(out.participants.size());
      out.participants.push_back(part.participant_id());
      tensor_index.ForPart(part, &part_tensor);
      const auto& frags = part.fragments();
      for (size_t j = 0; j < frags.size(); ++j) {
        const uint32_t t = part_tensor[part.fragment_tensor(j)];
        if (t == internal::PlanTensorIndex::kNotPlanned) {  // target lacks it
          out.table_index.push_back(t);
          continue;
        }
        const auto i = static_cast<uint32_t>(out.fragments.size());
        out.table_index.push_back(i);
        out.by_tensor[t].push_back(i);
        out.fragments.push_back(
            internal::ToPlanFragment(frags[j], part.participant_id(), pidx, t));
      }
    }
  };
  return Planner::Run(view, target, options);
}

}  // namespace internal

Result<LogicalTransferPlan> LogicalTransferPlan::Make(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const PlanOptions& options) {
  const SourceTensorLookup lookup = ConversionPlan::LookupIn(source);
  if (!options.convert) {
    RESHARD_RETURN_NOT_OK(CheckNoDtypeDifference(lookup, target));
    return internal::PlanFromPlacement(source, target, options);
  }
  RESHARD_ASSIGN_OR_RETURN(
      ConversionPlan conversion,
      ConversionPlan::Make(lookup, target, {options.fp8_block}));
  if (conversion.empty()) {
    return internal::PlanFromPlacement(source, target, options);
  }
  auto shared = std::make_shared<const ConversionPlan>(std::move(conversion));
  RESHARD_ASSIGN_OR_RETURN(
      LogicalTransferPlan plan,
      internal::PlanFromPlacement(source, shared->staging(), options));
  // Just made, so no other copy shares the state yet.
  std::const_pointer_cast<Impl>(plan.impl_)->conversion = std::move(shared);
  return plan;
}

Result<LogicalTransferPlan> LogicalTransferPlan::MakeFromStored(
    const StoredWeightManifest& source, const WeightPlacementManifest& target,
    const PlanOptions& options) {
  if (options.convert) {
    return Status::Unimplemented(
        "PlanOptions::convert: conversions out of a store revision are not "
        "supported yet (plan from a placement, or load and convert with "
        "reshard hf reshard --convert)");
  }
  const std::string id = "manifest:" + source.manifest_key();
  internal::PlanSource view{
      source.resource_id(),
      source.revision(),
      source.weight_generation(),
      id,
      nullptr,
      &source,
      {},
      [&](std::string_view t) { return source.FindTensor(t); },
      source.fragments().size(),
      {},
      ParallelSizes{}};
  for (const auto& t : source.tensors()) view.tensors.push_back(&t);
  // Every stored fragment is eligible; its "participant" is its object.
  view.add_fragments = [&](const internal::PlanTensorIndex& tensor_index,
                           internal::SourceTables out) {
    std::map<std::string_view, uint32_t> objects;
    for (const auto& f : source.fragments()) objects.emplace(f.object_key, 0);
    for (auto& [key, idx] : objects) {
      idx = out.participants.size();
      out.participants.emplace_back(key);
    }
    for (const auto& f : source.fragments()) {
      const uint32_t* t = tensor_index.Find(f.tensor_id);
      if (t == nullptr) continue;
      out.by_tensor[*t].push_back(out.fragments.size());
      out.fragments.push_back({f.stored_fragment_id, f.object_key,
                               ParallelRank{}, std::nullopt, *t,
                               f.global_offset, f.local_shape, f.nbytes,
                               objects.at(f.object_key), 0});
    }
  };
  return internal::Planner::Run(view, target, options);
}

PlanSourceKind LogicalTransferPlan::source_kind() const {
  return impl_->source_kind;
}
const ConversionPlan* LogicalTransferPlan::conversion() const {
  return impl_->conversion.get();
}
const std::string& LogicalTransferPlan::resource_id() const {
  return impl_->resource_id;
}
const std::string& LogicalTransferPlan::revision() const {
  return impl_->revision;
}
const std::string& LogicalTransferPlan::source_placement_id() const {
  return impl_->source_placement_id;
}
const std::string& LogicalTransferPlan::target_placement_id() const {
  return impl_->target_placement_id;
}
const std::vector<std::string>& LogicalTransferPlan::tensors() const {
  return impl_->tensors;
}
const std::vector<PlanFragment>& LogicalTransferPlan::source_fragments() const {
  return impl_->source_fragments;
}
const std::vector<PlanFragment>& LogicalTransferPlan::target_fragments() const {
  return impl_->target_fragments;
}
const std::vector<TransferRegion>& LogicalTransferPlan::regions() const {
  std::call_once(impl_->regions_ordered, [this] {
    internal::OrderRegions(impl_->source_fragments, impl_->target_fragments,
                           &impl_->regions);
  });
  return impl_->regions;
}
const std::vector<PipelineRoute>& LogicalTransferPlan::pipeline_routes() const {
  return impl_->routes;
}
const std::vector<std::string>& LogicalTransferPlan::source_participants()
    const {
  return impl_->source_participants;
}
const std::vector<uint64_t>& LogicalTransferPlan::source_bytes() const {
  return impl_->source_bytes;
}
const std::vector<std::string>& LogicalTransferPlan::target_participants()
    const {
  return impl_->target_participants;
}
const std::vector<uint64_t>& LogicalTransferPlan::target_bytes() const {
  return impl_->target_bytes;
}
const std::vector<TrafficEntry>& LogicalTransferPlan::traffic() const {
  return impl_->traffic;
}
const PlanSummary& LogicalTransferPlan::summary() const {
  return impl_->summary;
}

std::string LogicalTransferPlan::DescribeRegion(const TransferRegion& r) const {
  auto dims = [](const Dims& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) {
      if (i) s += ",";
      s += std::to_string(d[i]);
    }
    return s + "]";
  };
  std::string s =
      impl_->tensors[r.tensor] + " " + dims(r.overlap_offset) + "+" +
      dims(r.overlap_shape) + ": " +
      std::string(impl_->source_fragments[r.source_fragment].participant_id) +
      "@" + std::to_string(r.source_base_offset) + " -> " +
      std::string(impl_->target_fragments[r.target_fragment].participant_id) +
      "@" + std::to_string(r.target_base_offset) + ", inner " +
      std::to_string(r.inner_bytes);
  for (const auto& l : r.loops) {
    s += " x(" + std::to_string(l.count) + "," +
         std::to_string(l.source_stride) + "," +
         std::to_string(l.target_stride) + ")";
  }
  return s;
}

}  // namespace reshard
