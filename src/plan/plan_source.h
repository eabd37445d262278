// What the planner needs of a source (PlanSource), made for live placements
// and for stored manifests (logical_transfer_plan.cc), and the index of the
// planned tensors both sides' tables are filled through.

#ifndef RESHARD_PLAN_PLAN_SOURCE_H_
#define RESHARD_PLAN_PLAN_SOURCE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/stored_manifest.h"

namespace reshard::internal {

// Index of each planned tensor id in LogicalTransferPlan::tensors().
// Fragments come grouped by tensor, so the last hit is remembered: most lookups
// are one string comparison rather than a hash. Not for concurrent use.
class PlanTensorIndex {
 public:
  static constexpr uint32_t kNotPlanned = UINT32_MAX;

  PlanTensorIndex() = default;
  // The same ids with caches of its own: one index per thread.
  PlanTensorIndex(const PlanTensorIndex& other) : map_(other.map_) {}
  PlanTensorIndex& operator=(const PlanTensorIndex&) = delete;

  void Add(std::string_view id, uint32_t index) { map_.emplace(id, index); }
  // The index of `id`; nullptr if the plan does not need the tensor.
  const uint32_t* Find(std::string_view id) const {
    if (last_ != nullptr && last_->first == id) return &last_->second;
    const auto it = map_.find(id);
    if (it == map_.end()) return nullptr;
    last_ = &*it;
    return &it->second;
  }
  // The index of each of `part`'s tensors (kNotPlanned for a tensor the plan
  // does not need), so that fragment i's is
  // result[part.fragment_tensor(i)]. A part's fragments come in id order,
  // not grouped by tensor; descriptors decoded from one document share
  // their state, so a state seen in an earlier part is found by its
  // address instead of hashing its id again.
  void ForPart(const WeightPlacementPart& part,
               std::vector<uint32_t>* out) const {
    out->clear();
    for (const auto& t : part.tensors()) {
      auto [it, inserted] = by_state_.try_emplace(&t.tensor_id(), kNotPlanned);
      if (inserted) {
        const uint32_t* index = Find(t.tensor_id());
        if (index != nullptr) it->second = *index;
      }
      out->push_back(it->second);
    }
  }

 private:
  std::unordered_map<std::string_view, uint32_t> map_;
  mutable const std::pair<const std::string_view, uint32_t>* last_ = nullptr;
  // Address of a descriptor's id string -> its index (or kNotPlanned).
  mutable std::unordered_map<const std::string*, uint32_t> by_state_;
};

// Fragment `f` of participant `participant` (its index `participant_index`
// in its side's table) as a plan fragment of planned tensor `tensor`; its
// order is set once the table is complete.
inline PlanFragment ToPlanFragment(const PlacementFragment& f,
                                   std::string_view participant,
                                   uint32_t participant_index,
                                   uint32_t tensor) {
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

// The source side's tables as a PlanSource fills them.
struct SourceTables {
  std::vector<std::string>& participants;
  std::vector<PlanFragment>& fragments;
  // Per planned tensor, indices into `fragments`.
  std::vector<std::vector<uint32_t>>& by_tensor;
  // For a placement source: the table entry of each of its fragments,
  // counted part by part (PlanTensorIndex::kNotPlanned where not needed).
  std::vector<uint32_t>& table_index;
};

// What the planner needs of a source: identity, tensors and a way to emit
// the fragments of the tensors it needs. Made for live placements and for
// stored manifests.
struct PlanSource {
  const std::string& resource_id;
  const std::string& revision;
  uint64_t weight_generation;
  const std::string& id;
  // The source manifest, kept alive by the plan: exactly one of the two.
  // Which one is the plan's source_kind().
  const WeightPlacementManifest* placement = nullptr;
  const StoredWeightManifest* stored = nullptr;
  std::vector<const TensorDescriptor*> tensors;
  std::function<const TensorDescriptor*(std::string_view)> find_tensor;
  size_t fragment_count = 0;  // an upper bound, for reserving
  // Appends the fragments of the tensors in the index to the tables.
  std::function<void(const PlanTensorIndex&, SourceTables)> add_fragments;
  // The source topology's axis sizes (a placement's; all 1 for a stored
  // revision, whose fragments tile each tensor once).
  ParallelSizes sizes;
};

}  // namespace reshard::internal

#endif  // RESHARD_PLAN_PLAN_SOURCE_H_
