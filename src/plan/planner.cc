// The planner's steps 1-6 (docs/planner.md): checks, fragment tables,
// intersection of each target fragment with its tensor's source tiling,
// balanced choice of each region's serving fragment, and geometry. Step 7's
// summary is in plan_summary.cc, the regions' order in
// logical_transfer_plan.cc.

#include "plan/planner.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <string>
#include <thread>

#include "plan/geometry.h"
#include "plan/reference_replicas.h"
#include "util/claimed_runs.h"
#include "util/string_sort.h"

namespace reshard::internal {
namespace {

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
    // The fields compared are among the first the description names.
    return Status::InvalidArgument(
        "tensor descriptor mismatch: " + t.tensor_id() + ": " +
        DescribeDescriptorDifference(s, t, "source", "target"));
  }
  return Status::OK();
}

// Sets PlanFragment::order: the position of each fragment in id order.
void AssignOrder(std::vector<PlanFragment>* table) {
  std::vector<uint32_t> idx(table->size());
  std::iota(idx.begin(), idx.end(), 0);
  internal::SortByStringKey(&idx, [&](uint32_t i) -> std::string_view {
    return (*table)[i].fragment_id;
  });
  for (uint32_t pos = 0; pos < idx.size(); ++pos)
    (*table)[idx[pos]].order = pos;
}

// The same from the id order the manifest already holds
// (WeightPlacementManifest::fragments(), as FragmentPartPositions), without
// comparing an id: `table_index[q]` is the table entry of the manifest's
// q-th fragment counted part by part (kNotPlanned if the table lacks it).
// Fragment ids are unique in a manifest, so the orders equal AssignOrder's.
void AssignOrderFromManifest(const WeightPlacementManifest& m,
                             const std::vector<uint32_t>& table_index,
                             std::vector<PlanFragment>* table) {
  std::vector<uint32_t> order(table->size());
  uint32_t pos = 0;
  for (const uint32_t q : FragmentPartPositions(m)) {
    const uint32_t i = table_index[q];
    if (i != PlanTensorIndex::kNotPlanned) order[i] = pos++;
  }
  for (size_t i = 0; i < order.size(); ++i) (*table)[i].order = order[i];
}

// The region where target fragment `tf` (index `ti`) meets source box
// `box`, in global coordinates; the serving member is chosen later.
TransferRegion OverlapRegion(uint32_t tensor, uint32_t ti,
                             const int64_t* offset, const int64_t* shape,
                             size_t ndim, const SourceBox& box,
                             uint64_t itemsize) {
  TransferRegion r;
  r.tensor = tensor;
  r.target_fragment = ti;
  r.overlap_offset.resize(ndim);
  r.overlap_shape.resize(ndim);
  r.bytes = itemsize;
  for (size_t d = 0; d < ndim; ++d) {
    const int64_t b = std::max(offset[d], (*box.offset)[d]);
    const int64_t e =
        std::min(offset[d] + shape[d], (*box.offset)[d] + (*box.shape)[d]);
    r.overlap_offset[d] = b;
    r.overlap_shape[d] = e - b;
    r.bytes *= static_cast<uint64_t>(e - b);
  }
  return r;
}

}  // namespace

Result<LogicalTransferPlan> Planner::Run(const PlanSource& source,
                                         const WeightPlacementManifest& target,
                                         const PlanOptions& options) {
  Planner p(source, target, options);
  RESHARD_RETURN_NOT_OK(p.CheckIdentity());
  RESHARD_RETURN_NOT_OK(p.SelectTargetParts());
  RESHARD_RETURN_NOT_OK(p.CheckByteTotal());
  RESHARD_RETURN_NOT_OK(p.SelectTensors());
  p.ChooseThreads();
  p.BuildFragmentTables();
  RESHARD_RETURN_NOT_OK(p.Intersect());
  // The balance chooses each region's source fragment among its box's
  // members; the geometry reads the box, the same for every member: on
  // two threads when planning on several (each writes fields of the
  // regions the other does not touch).
  ForEachClaimed(2, p.threads_, [&p](size_t step, unsigned) {
    if (step == 0) return p.Balance();
    p.ComputeGeometry();
    p.BuildTargetSummaryColumns();  // the shorter step's thread
  });
  p.box_of_ = {};  // read no more (see Intersect)
  p.box_by_id_ = {};
  p.tensor_boxes_ = {};
  p.Summarise();
  return LogicalTransferPlan(std::move(p.impl_));
}

Status Planner::CheckIdentity() {
  if (source_.resource_id != target_.resource_id()) {
    return Status::InvalidArgument(
        "source and target resource_id differ: " + source_.resource_id +
        " vs " + target_.resource_id());
  }
  if (source_.revision != target_.revision()) {
    return Status::InvalidArgument(
        "source and target revision differ: " + source_.revision + " vs " +
        target_.revision());
  }
  if (source_.weight_generation != target_.weight_generation()) {
    return Status::InvalidArgument(
        "source and target weight_generation differ: " +
        std::to_string(source_.weight_generation) + " vs " +
        std::to_string(target_.weight_generation()));
  }
  if (source_.placement != nullptr) {
    impl_->source_placement = *source_.placement;
  }
  if (source_.stored != nullptr) impl_->source_stored = *source_.stored;
  impl_->target_placement = target_;
  impl_->source_kind = source_.stored != nullptr
                           ? PlanSourceKind::kStoredManifest
                           : PlanSourceKind::kPlacement;
  impl_->resource_id = target_.resource_id();
  impl_->revision = target_.revision();
  impl_->source_placement_id = source_.id;
  impl_->target_placement_id = target_.placement_id();
  return Status::OK();
}

Status Planner::SelectTargetParts() {
  if (!options_.target_participant_id.has_value()) {
    for (const auto& p : target_.parts()) target_parts_.push_back(&p);
    return Status::OK();
  }
  const std::string& id = *options_.target_participant_id;
  const auto* part = target_.FindPart(id);
  if (part == nullptr) {
    return Status::InvalidArgument("unknown target participant: " + id);
  }
  if (part->fragments().empty()) {
    return Status::InvalidArgument(
        "local target manifest is missing fragments: participant " + id +
        " holds none");
  }
  target_parts_.push_back(part);
  return Status::OK();
}

Status Planner::CheckByteTotal() const {
  uint64_t total = 0;
  for (const WeightPlacementPart* part : target_parts_) {
    for (const PlacementFragment& f : part->fragments()) {
      if (__builtin_add_overflow(total, f.nbytes(), &total)) {
        return Status::OutOfRange(
            "plan bytes exceed 2^64 - 1: the target fragments' nbytes "
            "overflow at fragment " +
            f.placement_fragment_id() + " (tensor " + f.tensor_id() +
            ", participant " + part->participant_id() + ")");
      }
    }
  }
  return Status::OK();
}

Status Planner::SelectTensors() {
  if (options_.target_participant_id.has_value()) {
    for (const auto& t : target_parts_.front()->tensors()) {
      plan_tensors_.push_back(target_.FindTensor(t.tensor_id()));
    }
  } else {
    for (const auto& t : target_.tensors()) plan_tensors_.push_back(&t);
    for (const auto* t : source_.tensors) {
      if (target_.FindTensor(t->tensor_id()) == nullptr) {
        return Status::InvalidArgument(
            "target manifests are missing tensors: " + t->tensor_id());
      }
    }
  }
  for (const auto* t : plan_tensors_) {
    const TensorDescriptor* s = source_.find_tensor(t->tensor_id());
    if (s == nullptr) {
      return Status::InvalidArgument(
          "target manifests contain unknown tensors: " + t->tensor_id());
    }
    RESHARD_RETURN_NOT_OK(CheckCompatible(*s, *t));
    tensor_index_.Add(t->tensor_id(),
                      static_cast<uint32_t>(impl_->tensors.size()));
    impl_->tensors.push_back(t->tensor_id());
  }
  return Status::OK();
}

void Planner::ChooseThreads() {
  unsigned threads = options_.threads;
  if (threads == 0) {
    size_t fragments = source_.fragment_count;
    for (const auto* part : target_parts_) {
      fragments += part->fragments().size();
    }
    threads = fragments < PlanOptions::kParallelPlanFragments
                  ? 1
                  : std::clamp(std::thread::hardware_concurrency(), 1u,
                               PlanOptions::kMaxPlanThreads);
  }
  // Today at most two steps run at once (the tables of both sides, the
  // geometry beside the summary): more threads would be idle.
  threads_ = std::min(threads, 2u);
}

void Planner::BuildFragmentTables() {
  source_by_tensor_.resize(plan_tensors_.size());
  target_by_tensor_.resize(plan_tensors_.size());
  box_dims_ = 0;
  for (const auto* t : plan_tensors_)
    box_dims_ = std::max(box_dims_, t->ndim());
  // The sides fill disjoint tables; the source's thread looks tensors up
  // in an index of its own (PlanTensorIndex caches its lookups).
  const PlanTensorIndex source_index(tensor_index_);
  ForEachClaimed(2, threads_, [&](size_t side, unsigned) {
    if (side == 1) return BuildTargetTable();
    BuildSourceTable(source_index);
    BuildSourceTilings();
  });
}

void Planner::BuildSourceTilings() {
  tensor_boxes_.resize(plan_tensors_.size());
  box_index_.resize(plan_tensors_.size());
  tiling_status_.resize(plan_tensors_.size());
  for (uint32_t t = 0; t < plan_tensors_.size(); ++t) {
    const TensorDescriptor& desc = *source_.find_tensor(impl_->tensors[t]);
    auto tiling = SourceTiling(desc, source_by_tensor_[t],
                               impl_->source_fragments, source_.sizes);
    if (!tiling.ok()) {
      tiling_status_[t] = tiling.status();
      continue;
    }
    tensor_boxes_[t] = std::move(tiling).ValueOrDie();
    box_index_[t].resize(1);
    box_index_[t][0].Build(tensor_boxes_[t].data(), tensor_boxes_[t].size(),
                           desc.ndim());
  }
  if (options_.replica_policy == ReplicaPolicy::kReference &&
      source_.placement != nullptr) {
    UseReferenceTilings();
  }
  source_participant_.resize(impl_->source_fragments.size());
  for (size_t i = 0; i < source_participant_.size(); ++i) {
    source_participant_[i] = impl_->source_fragments[i].participant;
  }
  tensor_first_.assign(tensor_boxes_.size() + 1, 0);
  for (size_t t = 0; t < tensor_boxes_.size(); ++t) {
    tensor_first_[t + 1] =
        tensor_first_[t] + static_cast<uint32_t>(tensor_boxes_[t].size());
  }
  box_first_.reserve(tensor_first_.back() + 1);
  box_first_.push_back(0);
  box_by_id_.reserve(tensor_first_.back());
  for (const auto& boxes : tensor_boxes_) {
    for (const SourceBox& box : boxes) {
      box_by_id_.push_back(&box);
      for (uint32_t m : box.members) {
        member_.push_back(m);
        member_participant_.push_back(source_participant_[m]);
      }
      box_first_.push_back(static_cast<uint32_t>(member_.size()));
    }
  }
  BuildSourceSummaryColumns();
}

void Planner::UseReferenceTilings() {
  for (const Status& st : tiling_status_) {
    if (!st.ok()) return;  // reported first, in tensor order
  }
  auto tilings = ReferenceTilings(*source_.placement, impl_->tensors,
                                  impl_->source_fragments);
  if (!tilings.ok()) {
    reference_status_ = tilings.status();
    return;
  }
  for (uint32_t t = 0; t < plan_tensors_.size(); ++t) {
    ReferenceTiling& r = (*tilings)[t];
    tensor_boxes_[t] = std::move(r.boxes);
    box_index_[t].assign(r.groups(), BoxIndex());
    for (size_t g = 0; g < r.groups(); ++g) {
      box_index_[t][g].Build(tensor_boxes_[t].data() + r.group_first[g],
                             r.group_first[g + 1] - r.group_first[g],
                             plan_tensors_[t]->ndim());
    }
  }
}

void Planner::BuildSourceTable(const PlanTensorIndex& index) {
  impl_->source_fragments.reserve(source_.fragment_count);
  std::vector<uint32_t> table_index;
  source_.add_fragments(index,
                        {impl_->source_participants, impl_->source_fragments,
                         source_by_tensor_, table_index});
  if (source_.placement != nullptr) {
    AssignOrderFromManifest(*source_.placement, table_index,
                            &impl_->source_fragments);
  } else {
    AssignOrder(&impl_->source_fragments);
  }
}

void Planner::BuildTargetTable() {
  size_t target_count = 0;
  for (const auto* part : target_parts_) {
    target_count += part->fragments().size();
  }
  impl_->target_fragments.reserve(target_count);
  target_box_.resize(target_count * 2 * box_dims_);
  target_nbytes_.resize(target_count);
  std::vector<uint32_t> part_tensor;
  for (const auto* part : target_parts_) {
    if (part->fragments().empty()) continue;
    const auto pidx = static_cast<uint32_t>(impl_->target_participants.size());
    impl_->target_participants.push_back(part->participant_id());
    tensor_index_.ForPart(*part, &part_tensor);
    const auto& frags = part->fragments();
    for (size_t j = 0; j < frags.size(); ++j) {
      const PlacementFragment& f = frags[j];
      const uint32_t t = part_tensor[part->fragment_tensor(j)];
      const auto i = static_cast<uint32_t>(impl_->target_fragments.size());
      target_by_tensor_[t].push_back(i);
      impl_->target_fragments.push_back(
          ToPlanFragment(f, part->participant_id(), pidx, t));
      // The box again, compactly, while it is in cache (see target_box_).
      int64_t* box = &target_box_[size_t{i} * 2 * box_dims_];
      const size_t n = std::min(f.global_offset().size(), box_dims_);
      std::copy_n(f.global_offset().begin(), n, box);
      std::copy_n(f.local_shape().begin(), n, box + box_dims_);
      target_nbytes_[i] = f.nbytes();
    }
  }
  // Every target fragment is in the table, in the manifest's part order: a
  // whole manifest's id order is the manifest's; one part's is the part's
  // own (its fragments are sorted by id).
  auto& targets = impl_->target_fragments;
  if (target_parts_.size() == 1) {
    for (uint32_t i = 0; i < targets.size(); ++i) targets[i].order = i;
  } else {
    std::vector<uint32_t> identity(targets.size());
    std::iota(identity.begin(), identity.end(), 0);
    AssignOrderFromManifest(target_, identity, &targets);
  }
}

Status Planner::Intersect() {
  impl_->regions.reserve(impl_->target_fragments.size());
  box_of_.reserve(impl_->target_fragments.size());
  region_bytes_.reserve(impl_->target_fragments.size());
  // Set only when every tiling succeeded (UseReferenceTilings).
  RESHARD_RETURN_NOT_OK(reference_status_);
  for (uint32_t t = 0; t < plan_tensors_.size(); ++t) {
    RESHARD_RETURN_NOT_OK(IntersectTensor(t));
  }
  box_index_ = {};
  // The steps after this one read regions, not these tables: their memory
  // goes before theirs is touched (a lower peak for a million fragments).
  target_box_ = {};
  target_nbytes_ = {};
  target_by_tensor_ = {};
  source_by_tensor_ = {};
  const uint64_t regions = impl_->regions.size();
  if (regions > options_.limits.max_operations) {
    return Status::ResourceExhausted(
        "plan exceeds max_operations: " + std::to_string(regions) + " > " +
        std::to_string(options_.limits.max_operations));
  }
  return Status::OK();
}

Status Planner::IntersectTensor(uint32_t t) {
  RESHARD_RETURN_NOT_OK(tiling_status_[t]);
  const TensorDescriptor& desc = *source_.find_tensor(impl_->tensors[t]);
  const std::vector<BoxIndex>& indexes = box_index_[t];
  const auto itemsize = static_cast<uint64_t>(desc.itemsize());
  auto& regions = impl_->regions;
  const size_t ndim = desc.ndim();
  const std::vector<uint32_t>& targets = target_by_tensor_[t];
  for (size_t k = 0; k < targets.size(); ++k) {
    // The tensor's targets lie spread over the compact columns too.
    if (k + kPrefetchAhead < targets.size()) {
      const uint32_t ahead = targets[k + kPrefetchAhead];
      __builtin_prefetch(&target_box_[ahead * 2 * box_dims_]);
      __builtin_prefetch(&target_nbytes_[ahead]);
    }
    const uint32_t ti = targets[k];
    const int64_t* offset = &target_box_[ti * 2 * box_dims_];
    const int64_t* shape = offset + box_dims_;
    uint64_t covered = 0;
    // One group but under the reference policy (BuildSourceTilings).
    const BoxIndex& index =
        indexes.size() == 1 ? indexes[0]
                            : indexes[static_cast<uint64_t>(
                                          impl_->target_fragments[ti].rank.dp) %
                                      indexes.size()];
    index.Query(offset, shape, [&](const SourceBox& box) {
      TransferRegion r =
          OverlapRegion(t, ti, offset, shape, ndim, box, itemsize);
      covered += r.bytes;
      region_bytes_.push_back(r.bytes);
      regions.push_back(std::move(r));
      box_of_.push_back(tensor_first_[t] +
                        static_cast<uint32_t>(&box - tensor_boxes_[t].data()));
    });
    if (covered != target_nbytes_[ti]) {
      return Status::InvalidArgument(
          "target fragment is not fully covered: " +
          std::string(impl_->target_fragments[ti].fragment_id));
    }
    if (regions.size() > options_.limits.max_transfer_regions) {
      return Status::ResourceExhausted(
          "plan exceeds max_transfer_regions: more than " +
          std::to_string(options_.limits.max_transfer_regions) +
          " regions (at tensor " + impl_->tensors[t] + ")");
    }
  }
  return Status::OK();
}

void Planner::Balance() {
  auto& regions = impl_->regions;
  const auto n = static_cast<uint32_t>(regions.size());
  impl_->source_bytes.assign(impl_->source_participants.size(), 0);
  auto& load = impl_->source_bytes;
  // Each to its box's member on the least loaded participant, the first
  // such member on ties.
  std::vector<uint32_t> chosen(n);
  const auto assign = [&](uint32_t i, uint64_t bytes) {
    const uint32_t g = box_of_[i];
    uint32_t best = box_first_[g];
    uint64_t best_load = load[member_participant_[best]];
    for (uint32_t j = best + 1; j < box_first_[g + 1]; ++j) {
      const uint64_t l = load[member_participant_[j]];
      if (l < best_load) {
        best = j;
        best_load = l;
      }
    }
    chosen[i] = member_[best];
    load[member_participant_[best]] += bytes;
  };
  // Largest regions first, ties in region order, by one sort of one array
  // that holds what the pass reads: each key (largest - bytes, index) in
  // one integer where both fit (always but for regions of petabytes), else
  // (inverted bytes, index) pairs. Radix sorts: sizes span a few bytes.
  uint64_t largest = 0;
  for (uint64_t b : region_bytes_) largest = std::max(largest, b);
  const int index_bits = n < 2 ? 0 : std::bit_width(n - 1);
  if (std::bit_width(largest) + index_bits <= 64) {
    std::vector<uint64_t>& keys = region_bytes_;
    for (uint32_t i = 0; i < n; ++i) {
      keys[i] = (largest - keys[i]) << index_bits | i;
    }
    RadixSortByKey(&keys, [](uint64_t k) { return k; });
    const uint64_t index_mask = (uint64_t{1} << index_bits) - 1;
    for (size_t p = 0; p < keys.size(); ++p) {
      // The regions come in random order: start their misses ahead.
      if (p + 2 * kPrefetchAhead < keys.size()) {
        const uint64_t ahead = keys[p + 2 * kPrefetchAhead] & index_mask;
        __builtin_prefetch(&box_of_[ahead]);
        __builtin_prefetch(&chosen[ahead]);
      }
      if (p + kPrefetchAhead < keys.size()) {
        const uint32_t g = box_of_[keys[p + kPrefetchAhead] & index_mask];
        __builtin_prefetch(&box_first_[g]);
      }
      const uint64_t k = keys[p];
      assign(static_cast<uint32_t>(k & index_mask),
             largest - (k >> index_bits));
    }
  } else {
    std::vector<std::pair<uint64_t, size_t>> by_size(n);
    for (uint32_t i = 0; i < n; ++i) by_size[i] = {~region_bytes_[i], i};
    region_bytes_ = {};
    RadixSortByFirst(&by_size);
    for (const auto& [inverted, i] : by_size) {
      assign(static_cast<uint32_t>(i), ~inverted);
    }
  }
  region_bytes_ = {};
  box_first_ = {};
  member_ = {};
  member_participant_ = {};
  for (uint32_t i = 0; i < n; ++i) regions[i].source_fragment = chosen[i];
}

void Planner::ComputeGeometry() {
  const auto& tfr = impl_->target_fragments;
  auto& regions = impl_->regions;
  uint64_t segments = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    // Regions reach their boxes and fragments in random order: start the
    // misses a few regions ahead (the box's pointers first).
    if (i + 2 * kPrefetchAhead < regions.size()) {
      __builtin_prefetch(box_by_id_[box_of_[i + 2 * kPrefetchAhead]]);
    }
    if (i + kPrefetchAhead < regions.size()) {
      const SourceBox& box = *box_by_id_[box_of_[i + kPrefetchAhead]];
      __builtin_prefetch(box.offset);
      __builtin_prefetch(box.shape);
      const TransferRegion& ahead = regions[i + kPrefetchAhead];
      __builtin_prefetch(&tfr[ahead.target_fragment].global_offset);
      __builtin_prefetch(&tfr[ahead.target_fragment].local_shape);
    }
    TransferRegion& r = regions[i];
    const SourceBox& box = *box_by_id_[box_of_[i]];
    const PlanFragment& tf = tfr[r.target_fragment];
    RegionGeometry g = ComputeRegionGeometry(
        *box.offset, *box.shape, tf.global_offset, tf.local_shape,
        r.overlap_offset, r.overlap_shape, plan_tensors_[r.tensor]->itemsize());
    r.source_base_offset = g.source_base_offset;
    r.target_base_offset = g.target_base_offset;
    r.inner_bytes = g.inner_bytes;
    r.loops = std::move(g.loops);
    r.segments = g.segments;
    segments += g.segments;
  }
  impl_->summary.segments = segments;
}

}  // namespace reshard::internal
