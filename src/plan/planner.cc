// The planner: replica/owner selection, candidate index, overlap regions,
// balanced source choice, summaries.

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include "plan/geometry.h"
#include "reshard/plan.h"
#include "util/canonical_json.h"
#include "util/string_sort.h"

namespace reshard {

struct LogicalTransferPlan::Impl {
  bool stored_source = false;  // routes then have no source pp
  std::string resource_id;
  std::string revision;
  std::string source_placement_id;
  std::string target_placement_id;
  std::vector<std::string> tensors;
  std::vector<PlanFragment> source_fragments;
  std::vector<PlanFragment> target_fragments;
  std::vector<TransferRegion> regions;
  std::vector<PipelineRoute> routes;
  std::vector<std::string> source_participants;
  std::vector<uint64_t> source_bytes;
  std::vector<std::string> target_participants;
  std::vector<uint64_t> target_bytes;
  std::vector<TrafficEntry> traffic;
  PlanSummary summary;
};

namespace {

using AxisKey = std::array<int64_t, 4>;

// The rank projected on the kinds of `t` with the given semantics.
AxisKey Project(const ParallelRank& r, const TensorDescriptor& t,
                AxisSemantics a, AxisSemantics b) {
  AxisKey k{-1, -1, -1, -1};
  for (const auto& axis : t.parallel_axes()) {
    if (axis.semantics() == a || axis.semantics() == b) {
      k[static_cast<size_t>(axis.kind())] = r.Get(axis.kind());
    }
  }
  return k;
}

// One box of the chosen source tiling and the interchangeable fragments
// (one per cover group) that hold it.
struct SourceBox {
  const Dims* offset;
  const Dims* shape;
  std::vector<uint32_t> members;  // source fragment indices
};

// Boxes of one tensor indexed for interval queries along one dimension:
// sorted by begin, with a running maximum of ends, so a query visits only
// boxes whose begin lies before the query's end.
class BoxIndex {
 public:
  // `boxes` must outlive the index.
  void Build(const std::vector<SourceBox>& boxes, size_t ndim) {
    boxes_.clear();
    for (const auto& b : boxes) boxes_.push_back(&b);
    // Sweep the dimension with the most distinct begin coordinates.
    size_t best = 0;
    size_t best_distinct = 0;
    std::vector<int64_t> v(boxes_.size());
    for (size_t d = 0; d < ndim; ++d) {
      for (size_t i = 0; i < boxes_.size(); ++i) v[i] = (*boxes_[i]->offset)[d];
      std::sort(v.begin(), v.end());
      size_t distinct = std::unique(v.begin(), v.end()) - v.begin();
      if (distinct > best_distinct) {
        best_distinct = distinct;
        best = d;
      }
    }
    dim_ = best;
    std::sort(boxes_.begin(), boxes_.end(), [&](const auto* a, const auto* b) {
      return (*a->offset)[dim_] < (*b->offset)[dim_];
    });
    max_end_.resize(boxes_.size());
    int64_t m = INT64_MIN;
    for (size_t i = 0; i < boxes_.size(); ++i) {
      m = std::max(m, (*boxes_[i]->offset)[dim_] + (*boxes_[i]->shape)[dim_]);
      max_end_[i] = m;
    }
  }

  // Calls f(box) for every box intersecting [offset, offset + shape).
  template <typename F>
  void Query(const Dims& offset, const Dims& shape, F&& f) const {
    const int64_t a = offset[dim_];
    const int64_t b = a + shape[dim_];
    size_t i = std::upper_bound(max_end_.begin(), max_end_.end(), a) -
               max_end_.begin();
    for (; i < boxes_.size() && (*boxes_[i]->offset)[dim_] < b; ++i) {
      const SourceBox& box = *boxes_[i];
      bool hit = true;
      for (size_t d = 0; d < offset.size() && hit; ++d) {
        hit = (*box.offset)[d] < offset[d] + shape[d] &&
              offset[d] < (*box.offset)[d] + (*box.shape)[d];
      }
      if (hit) f(box);
    }
  }

 private:
  std::vector<const SourceBox*> boxes_;
  std::vector<int64_t> max_end_;
  size_t dim_ = 0;
};

Status CheckCompatible(const TensorDescriptor& s, const TensorDescriptor& t) {
  if (s.layout_fingerprint() != t.layout_fingerprint()) {
    return Status::InvalidArgument("layout mismatch for tensor " +
                                   t.tensor_id() + ": source \"" +
                                   s.layout_fingerprint() + "\", target \"" +
                                   t.layout_fingerprint() + "\"");
  }
  if (s.global_shape() != t.global_shape() || s.dtype() != t.dtype() ||
      s.itemsize() != t.itemsize() || s.layer_id() != t.layer_id() ||
      s.expert_id() != t.expert_id()) {
    return Status::InvalidArgument("tensor descriptor mismatch: " +
                                   t.tensor_id());
  }
  return Status::OK();
}

PlanFragment ToPlanFragment(const PlacementFragment& f,
                            const std::string& participant,
                            uint32_t participant_index, uint32_t tensor) {
  return {f.placement_fragment_id(),
          participant,
          f.rank(),
          f.pipeline_stage_id(),
          tensor,
          f.global_offset(),
          f.local_shape(),
          f.nbytes(),
          participant_index,
          0};
}

// Sets PlanFragment::order: the position of each fragment in id order.
void AssignOrder(std::vector<PlanFragment>* table) {
  std::vector<uint32_t> idx(table->size());
  std::iota(idx.begin(), idx.end(), 0);
  internal::SortByStringKey(&idx, [&](uint32_t i) -> const std::string& {
    return (*table)[i].fragment_id;
  });
  for (uint32_t pos = 0; pos < idx.size(); ++pos)
    (*table)[idx[pos]].order = pos;
}

// Chooses the source tiling of one tensor and returns its boxes with their
// interchangeable members. Cover groups are the (owner, replica) groups,
// each a complete cover; groups with identical tilings hold the same boxes.
Result<std::vector<SourceBox>> SourceBoxes(
    const TensorDescriptor& t, const std::vector<uint32_t>& frags,
    const std::vector<PlanFragment>& table) {
  std::map<AxisKey, std::vector<uint32_t>> groups;
  for (uint32_t i : frags) {
    groups[Project(table[i].rank, t, AxisSemantics::kOwnership,
                   AxisSemantics::kReplicated)]
        .push_back(i);
  }
  const ParallelAxis* dp = t.FindAxis(AxisKind::kDp);
  // DP ownership is ambiguous when more than one DP rank owns the tensor
  // (replicas over other axes within one owner are fine).
  auto owners_differ = [&] {
    for (uint32_t i : frags) {
      if (table[i].rank.dp != table[frags.front()].rank.dp) return true;
    }
    return false;
  };
  if (dp != nullptr && dp->semantics() == AxisSemantics::kOwnership &&
      owners_differ()) {
    return Status::InvalidArgument(
        "DP-owned source tensor has ambiguous declared owners: " +
        t.tensor_id());
  }
  // Tiling signature: the sorted boxes of a group.
  auto box_less = [&](uint32_t a, uint32_t b) {
    return std::tie(table[a].global_offset, table[a].local_shape) <
           std::tie(table[b].global_offset, table[b].local_shape);
  };
  std::vector<std::vector<uint32_t>> classes;  // groups, by tiling
  std::vector<std::vector<uint32_t>*> reps;    // first group of each class
  std::vector<std::vector<std::vector<uint32_t>*>> members;
  for (auto& [key, g] : groups) {
    std::sort(g.begin(), g.end(), box_less);
    size_t c = 0;
    for (; c < reps.size(); ++c) {
      const auto& r = *reps[c];
      if (r.size() != g.size()) continue;
      bool same = true;
      for (size_t i = 0; i < g.size() && same; ++i) {
        same = table[r[i]].global_offset == table[g[i]].global_offset &&
               table[r[i]].local_shape == table[g[i]].local_shape;
      }
      if (same) break;
    }
    if (c == reps.size()) {
      reps.push_back(&g);
      members.emplace_back();
    }
    members[c].push_back(&g);
  }
  // The tiling held by the most groups offers the most choice; ties go to
  // the class of the smallest group key (map order).
  size_t best = 0;
  for (size_t c = 1; c < members.size(); ++c) {
    if (members[c].size() > members[best].size()) best = c;
  }
  std::vector<SourceBox> boxes;
  const auto& rep = *reps[best];
  boxes.reserve(rep.size());
  for (size_t i = 0; i < rep.size(); ++i) {
    SourceBox box{&table[rep[i]].global_offset, &table[rep[i]].local_shape, {}};
    for (const auto* g : members[best]) box.members.push_back((*g)[i]);
    std::sort(box.members.begin(), box.members.end(), [&](auto a, auto b) {
      return std::tie(table[a].rank, table[a].fragment_id) <
             std::tie(table[b].rank, table[b].fragment_id);
    });
    boxes.push_back(std::move(box));
  }
  return boxes;
}

}  // namespace

// What the planner needs of a source: identity, tensors and a way to emit
// the fragments of the tensors it needs. Implemented for live placements
// and for stored manifests.
struct LogicalTransferPlan::SourceView {
  const std::string& resource_id;
  const std::string& revision;
  uint64_t weight_generation;
  const std::string& id;
  std::vector<const TensorDescriptor*> tensors;
  std::function<const TensorDescriptor*(std::string_view)> find_tensor;
  size_t fragment_count = 0;  // an upper bound, for reserving
  // Appends the fragments of needed tensors to the plan's source table.
  std::function<void(const std::unordered_map<std::string_view, uint32_t>&,
                     Impl*, std::vector<std::vector<uint32_t>>*)>
      add_fragments;
};

Result<LogicalTransferPlan> LogicalTransferPlan::Make(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const PlanOptions& options) {
  SourceView view{source.resource_id(),
                  source.revision(),
                  source.weight_generation(),
                  source.placement_id(),
                  {},
                  [&](std::string_view id) { return source.FindTensor(id); },
                  {}};
  for (const auto& t : source.tensors()) view.tensors.push_back(&t);
  view.fragment_count = source.fragments().size();
  view.add_fragments = [&](const auto& tensor_index, Impl* impl,
                           std::vector<std::vector<uint32_t>>* by_tensor) {
    for (const auto& part : source.parts()) {
      if (part.fragments().empty()) continue;
      const auto pidx = static_cast<uint32_t>(impl->source_participants.size());
      impl->source_participants.push_back(part.participant_id());
      for (const auto& f : part.fragments()) {
        auto it = tensor_index.find(f.tensor_id());
        if (it == tensor_index.end()) continue;  // not needed by the target
        (*by_tensor)[it->second].push_back(impl->source_fragments.size());
        impl->source_fragments.push_back(
            ToPlanFragment(f, part.participant_id(), pidx, it->second));
      }
    }
  };
  return Plan(view, target, options);
}

Result<LogicalTransferPlan> LogicalTransferPlan::MakeFromStored(
    const StoredWeightManifest& source, const WeightPlacementManifest& target,
    const PlanOptions& options) {
  const std::string id = "manifest:" + source.manifest_key();
  SourceView view{source.resource_id(),
                  source.revision(),
                  source.weight_generation(),
                  id,
                  {},
                  [&](std::string_view t) { return source.FindTensor(t); },
                  {}};
  for (const auto& t : source.tensors()) view.tensors.push_back(&t);
  view.fragment_count = source.fragments().size();
  // Every stored fragment is eligible; its "participant" is its object.
  view.add_fragments = [&](const auto& tensor_index, Impl* impl,
                           std::vector<std::vector<uint32_t>>* by_tensor) {
    impl->stored_source = true;
    std::map<std::string_view, uint32_t> objects;
    for (const auto& f : source.fragments()) objects.emplace(f.object_key, 0);
    for (auto& [key, idx] : objects) {
      idx = impl->source_participants.size();
      impl->source_participants.emplace_back(key);
    }
    for (const auto& f : source.fragments()) {
      auto it = tensor_index.find(f.tensor_id);
      if (it == tensor_index.end()) continue;
      (*by_tensor)[it->second].push_back(impl->source_fragments.size());
      impl->source_fragments.push_back(
          {f.fragment_id, f.object_key, ParallelRank{}, std::nullopt,
           it->second, f.global_offset, f.local_shape, f.nbytes,
           objects.at(f.object_key), 0});
    }
  };
  return Plan(view, target, options);
}

Result<LogicalTransferPlan> LogicalTransferPlan::Plan(
    const SourceView& source, const WeightPlacementManifest& target,
    const PlanOptions& options) {
  if (source.resource_id != target.resource_id()) {
    return Status::InvalidArgument(
        "source and target resource_id differ: " + source.resource_id + " vs " +
        target.resource_id());
  }
  if (source.revision != target.revision()) {
    return Status::InvalidArgument(
        "source and target revision differ: " + source.revision + " vs " +
        target.revision());
  }
  if (source.weight_generation != target.weight_generation()) {
    return Status::InvalidArgument(
        "source and target weight_generation differ: " +
        std::to_string(source.weight_generation) + " vs " +
        std::to_string(target.weight_generation()));
  }
  auto impl = std::make_shared<Impl>();
  impl->resource_id = target.resource_id();
  impl->revision = target.revision();
  impl->source_placement_id = source.id;
  impl->target_placement_id = target.placement_id();

  // Target selection: every part, or one local participant.
  std::vector<const WeightPlacementPart*> target_parts;
  if (options.target_participant_id.has_value()) {
    const auto* part = target.FindPart(*options.target_participant_id);
    if (part == nullptr) {
      return Status::InvalidArgument("unknown target participant: " +
                                     *options.target_participant_id);
    }
    if (part->fragments().empty()) {
      return Status::InvalidArgument(
          "local target manifest is missing fragments: participant " +
          *options.target_participant_id + " holds none");
    }
    target_parts.push_back(part);
  } else {
    for (const auto& p : target.parts()) target_parts.push_back(&p);
  }
  // Tensor sets.
  std::vector<const TensorDescriptor*> plan_tensors;
  if (options.target_participant_id.has_value()) {
    for (const auto& t : target_parts.front()->tensors()) {
      plan_tensors.push_back(target.FindTensor(t.tensor_id()));
    }
  } else {
    for (const auto& t : target.tensors()) plan_tensors.push_back(&t);
    for (const auto* t : source.tensors) {
      if (target.FindTensor(t->tensor_id()) == nullptr) {
        return Status::InvalidArgument(
            "target manifests are missing tensors: " + t->tensor_id());
      }
    }
  }
  std::unordered_map<std::string_view, uint32_t> tensor_index;
  for (const auto* t : plan_tensors) {
    const TensorDescriptor* s = source.find_tensor(t->tensor_id());
    if (s == nullptr) {
      return Status::InvalidArgument(
          "target manifests contain unknown tensors: " + t->tensor_id());
    }
    RESHARD_RETURN_NOT_OK(CheckCompatible(*s, *t));
    tensor_index.emplace(t->tensor_id(), impl->tensors.size());
    impl->tensors.push_back(t->tensor_id());
  }

  // Fragment tables and participants.
  std::vector<std::vector<uint32_t>> source_by_tensor(plan_tensors.size());
  impl->source_fragments.reserve(source.fragment_count);
  source.add_fragments(tensor_index, impl.get(), &source_by_tensor);
  AssignOrder(&impl->source_fragments);
  std::vector<std::vector<uint32_t>> target_by_tensor(plan_tensors.size());
  size_t target_count = 0;
  for (const auto* part : target_parts)
    target_count += part->fragments().size();
  impl->target_fragments.reserve(target_count);
  for (const auto* part : target_parts) {
    if (part->fragments().empty()) continue;
    const auto pidx = static_cast<uint32_t>(impl->target_participants.size());
    impl->target_participants.push_back(part->participant_id());
    for (const auto& f : part->fragments()) {
      const uint32_t t = tensor_index.at(f.tensor_id());
      const auto i = static_cast<uint32_t>(impl->target_fragments.size());
      target_by_tensor[t].push_back(i);
      impl->target_fragments.push_back(
          ToPlanFragment(f, part->participant_id(), pidx, t));
    }
  }
  AssignOrder(&impl->target_fragments);

  // Overlap regions; each remembers its source box, and the serving
  // fragment among the box's interchangeable members is chosen afterwards.
  auto& regions = impl->regions;
  std::vector<const SourceBox*> region_box;
  regions.reserve(impl->target_fragments.size());
  region_box.reserve(impl->target_fragments.size());
  std::vector<std::vector<SourceBox>> tensor_boxes(plan_tensors.size());
  for (uint32_t t = 0; t < plan_tensors.size(); ++t) {
    const TensorDescriptor& desc = *source.find_tensor(impl->tensors[t]);
    RESHARD_ASSIGN_OR_RETURN(
        tensor_boxes[t],
        SourceBoxes(desc, source_by_tensor[t], impl->source_fragments));
    BoxIndex index;
    index.Build(tensor_boxes[t], desc.ndim());
    const auto itemsize = static_cast<uint64_t>(desc.itemsize());
    const size_t ndim = desc.ndim();
    for (uint32_t ti : target_by_tensor[t]) {
      const PlanFragment& tf = impl->target_fragments[ti];
      uint64_t covered = 0;
      index.Query(tf.global_offset, tf.local_shape, [&](const SourceBox& box) {
        TransferRegion r;
        r.tensor = t;
        r.target_fragment = ti;
        r.overlap_offset.resize(ndim);
        r.overlap_shape.resize(ndim);
        r.bytes = itemsize;
        for (size_t d = 0; d < ndim; ++d) {
          const int64_t b = std::max(tf.global_offset[d], (*box.offset)[d]);
          const int64_t e = std::min(tf.global_offset[d] + tf.local_shape[d],
                                     (*box.offset)[d] + (*box.shape)[d]);
          r.overlap_offset[d] = b;
          r.overlap_shape[d] = e - b;
          r.bytes *= static_cast<uint64_t>(e - b);
        }
        covered += r.bytes;
        regions.push_back(std::move(r));
        region_box.push_back(&box);
      });
      if (covered != tf.nbytes) {
        return Status::InvalidArgument(
            "target fragment is not fully covered: " + tf.fragment_id);
      }
      if (regions.size() > options.limits.max_transfer_regions) {
        return Status::ResourceExhausted(
            "plan exceeds max_transfer_regions: more than " +
            std::to_string(options.limits.max_transfer_regions) +
            " regions (at tensor " + impl->tensors[t] + ")");
      }
    }
  }
  if (regions.size() > options.limits.max_operations) {
    return Status::ResourceExhausted(
        "plan exceeds max_operations: " + std::to_string(regions.size()) +
        " > " + std::to_string(options.limits.max_operations));
  }

  // Balanced choice: largest regions first, each to the candidate whose
  // participant has served the fewest bytes so far (ties: rank order).
  const auto& sfr = impl->source_fragments;
  const auto& tfr = impl->target_fragments;
  impl->source_bytes.assign(impl->source_participants.size(), 0);
  auto& load = impl->source_bytes;
  std::vector<uint32_t> order(regions.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return regions[a].bytes > regions[b].bytes;
  });
  // Compact per-fragment columns: the loops below touch fragments in
  // random order, and whole PlanFragments would miss the cache each time.
  std::vector<uint32_t> source_participant(sfr.size());
  for (size_t i = 0; i < sfr.size(); ++i) {
    source_participant[i] = sfr[i].participant;
  }
  for (uint32_t i : order) {
    const auto& members = region_box[i]->members;
    uint32_t best = members.front();
    for (uint32_t m : members) {
      if (load[source_participant[m]] < load[source_participant[best]]) {
        best = m;
      }
    }
    regions[i].source_fragment = best;
    load[source_participant[best]] += regions[i].bytes;
  }

  // Geometry, then the canonical order: (target fragment id, target base
  // offset, source fragment id, source base offset).
  for (auto& r : regions) {
    const PlanFragment& sf = sfr[r.source_fragment];
    const PlanFragment& tf = tfr[r.target_fragment];
    internal::RegionGeometry g = internal::ComputeRegionGeometry(
        sf.global_offset, sf.local_shape, tf.global_offset, tf.local_shape,
        r.overlap_offset, r.overlap_shape, plan_tensors[r.tensor]->itemsize());
    r.source_base_offset = g.source_base_offset;
    r.target_base_offset = g.target_base_offset;
    r.inner_bytes = g.inner_bytes;
    r.loops = std::move(g.loops);
    r.segments = g.segments;
  }
  {
    struct Key {
      uint32_t target_order;
      uint64_t target_base;
      uint32_t source_order;
      uint64_t source_base;
      uint32_t index;
    };
    std::vector<Key> keys;
    keys.reserve(regions.size());
    for (uint32_t i = 0; i < regions.size(); ++i) {
      const auto& r = regions[i];
      keys.push_back({tfr[r.target_fragment].order, r.target_base_offset,
                      sfr[r.source_fragment].order, r.source_base_offset, i});
    }
    std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
      return std::tie(a.target_order, a.target_base, a.source_order,
                      a.source_base) < std::tie(b.target_order, b.target_base,
                                                b.source_order, b.source_base);
    });
    std::vector<TransferRegion> sorted;
    sorted.reserve(regions.size());
    for (const Key& k : keys) sorted.push_back(std::move(regions[k.index]));
    regions = std::move(sorted);
  }

  // Summaries: totals, per-participant bytes, traffic, routes.
  impl->target_bytes.assign(impl->target_participants.size(), 0);
  std::vector<std::pair<uint64_t, uint64_t>> traffic;  // (pair key, bytes)
  traffic.reserve(regions.size());
  std::map<std::array<int64_t, 4>, std::pair<uint64_t, uint64_t>> routes;
  std::vector<bool> used(sfr.size(), false);
  PlanSummary& sum = impl->summary;
  std::array<int64_t, 4> last_route{-2, -2, -2, -2};
  std::pair<uint64_t, uint64_t>* route = nullptr;
  std::vector<std::pair<int64_t, int64_t>> source_route(sfr.size());
  for (size_t i = 0; i < sfr.size(); ++i) {
    source_route[i] = {impl->stored_source ? -1 : sfr[i].rank.pp,
                       sfr[i].pipeline_stage_id.value_or(-1)};
  }
  for (const auto& r : regions) {
    const auto& [source_pp, source_stage] = source_route[r.source_fragment];
    const PlanFragment& tf = tfr[r.target_fragment];
    impl->target_bytes[tf.participant] += r.bytes;
    traffic.emplace_back(
        (uint64_t{source_participant[r.source_fragment]} << 32) |
            tf.participant,
        r.bytes);
    const std::array<int64_t, 4> key{source_pp, source_stage, tf.rank.pp,
                                     tf.pipeline_stage_id.value_or(-1)};
    if (route == nullptr || key != last_route) {
      route = &routes[key];
      last_route = key;
    }
    route->first += 1;
    route->second += r.bytes;
    used[r.source_fragment] = true;
    sum.regions += 1;
    sum.segments += r.segments;
    sum.bytes += r.bytes;
  }
  sum.operations = sum.regions;
  sum.source_fragments_used = std::count(used.begin(), used.end(), true);
  for (uint64_t b : impl->source_bytes) {
    sum.max_source_bytes = std::max(sum.max_source_bytes, b);
  }
  for (uint64_t b : impl->target_bytes) {
    sum.max_target_bytes = std::max(sum.max_target_bytes, b);
  }
  sum.mean_source_bytes =
      impl->source_participants.empty()
          ? 0.0
          : static_cast<double>(sum.bytes) / impl->source_participants.size();
  std::sort(traffic.begin(), traffic.end());
  for (const auto& [key, bytes] : traffic) {
    const auto sp = static_cast<uint32_t>(key >> 32);
    const auto tp = static_cast<uint32_t>(key & 0xFFFFFFFFu);
    if (!impl->traffic.empty() &&
        impl->traffic.back().source_participant == sp &&
        impl->traffic.back().target_participant == tp) {
      impl->traffic.back().bytes += bytes;
    } else {
      impl->traffic.push_back({sp, tp, bytes});
    }
  }
  for (const auto& [key, value] : routes) {
    impl->routes.push_back(
        {key[0], key[1], key[2], key[3], value.first, value.second});
  }
  return LogicalTransferPlan(std::move(impl));
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
  std::string s = impl_->tensors[r.tensor] + " " + dims(r.overlap_offset) +
                  "+" + dims(r.overlap_shape) + ": " +
                  impl_->source_fragments[r.source_fragment].participant_id +
                  "@" + std::to_string(r.source_base_offset) + " -> " +
                  impl_->target_fragments[r.target_fragment].participant_id +
                  "@" + std::to_string(r.target_base_offset) + ", inner " +
                  std::to_string(r.inner_bytes);
  for (const auto& l : r.loops) {
    s += " x(" + std::to_string(l.count) + "," +
         std::to_string(l.source_stride) + "," +
         std::to_string(l.target_stride) + ")";
  }
  return s;
}

std::string PlanSummaryToJson(const LogicalTransferPlan& plan) {
  const PlanSummary& s = plan.summary();
  std::string out;
  internal::CanonicalJsonWriter w(&out);
  auto participants = [&](const std::vector<std::string>& ids,
                          const std::vector<uint64_t>& bytes) {
    w.BeginArray();
    for (size_t i = 0; i < ids.size(); ++i) {
      w.BeginObject();
      w.KeyUInt("bytes", bytes[i]);
      w.KeyString("participant_id", ids[i]);
      w.EndObject();
    }
    w.EndArray();
  };
  w.BeginObject();
  w.KeyUInt("bytes", s.bytes);
  w.KeyUInt("max_source_bytes", s.max_source_bytes);
  w.KeyUInt("max_target_bytes", s.max_target_bytes);
  // Integer-valued in the canonical writer: bytes per participant, rounded.
  w.KeyUInt("mean_source_bytes",
            static_cast<uint64_t>(s.mean_source_bytes + 0.5));
  w.KeyUInt("operations", s.operations);
  w.Key("pipeline_routes");
  w.BeginArray();
  for (const auto& r : plan.pipeline_routes()) {
    w.BeginObject();
    w.KeyUInt("bytes", r.bytes);
    w.KeyUInt("operations", r.operations);
    w.KeyInt("source_pp", r.source_pp);
    w.KeyInt("source_stage", r.source_stage);
    w.KeyInt("target_pp", r.target_pp);
    w.KeyInt("target_stage", r.target_stage);
    w.EndObject();
  }
  w.EndArray();
  w.KeyUInt("regions", s.regions);
  w.KeyUInt("segments", s.segments);
  w.KeyUInt("source_fragments", plan.source_fragments().size());
  w.KeyUInt("source_fragments_used", s.source_fragments_used);
  w.Key("source_participants");
  participants(plan.source_participants(), plan.source_bytes());
  w.KeyString("source_placement_id", plan.source_placement_id());
  w.KeyUInt("target_fragments", plan.target_fragments().size());
  w.Key("target_participants");
  participants(plan.target_participants(), plan.target_bytes());
  w.KeyString("target_placement_id", plan.target_placement_id());
  w.Key("traffic");
  w.BeginArray();
  for (const auto& e : plan.traffic()) {
    w.BeginObject();
    w.KeyUInt("bytes", e.bytes);
    w.KeyString("source", plan.source_participants()[e.source_participant]);
    w.KeyString("target", plan.target_participants()[e.target_participant]);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return out;
}

}  // namespace reshard
