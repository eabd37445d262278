// The planner (docs/planner.md): one target planned from one source, step
// by step. Its steps are in planner.cc, the summary in plan_summary.cc, the
// source tiling in source_tiling.cc.

#ifndef RESHARD_PLAN_PLANNER_H_
#define RESHARD_PLAN_PLANNER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "plan/plan_impl.h"
#include "plan/plan_source.h"
#include "plan/plan_summary.h"
#include "plan/source_tiling.h"
#include "reshard/plan.h"
#include "reshard/status.h"

namespace reshard::internal {

// Plans one target from one source in the steps of docs/planner.md. Each
// step reads what the steps before it left in the plan being built.
class Planner {
 public:
  // Plans `target` from `source` (steps 1-7 but the regions' order, which
  // LogicalTransferPlan::regions() makes on first use).
  static Result<LogicalTransferPlan> Run(const PlanSource& source,
                                         const WeightPlacementManifest& target,
                                         const PlanOptions& options);

 private:
  Planner(const PlanSource& source, const WeightPlacementManifest& target,
          const PlanOptions& options)
      : source_(source),
        target_(target),
        options_(options),
        impl_(std::make_shared<LogicalTransferPlan::Impl>()) {}

  // Step 1: same resource, revision and weight generation.
  Status CheckIdentity();
  // Every target part, or the one local participant's.
  Status SelectTargetParts();
  // The selected target fragments' bytes sum to at most 2^64 - 1, which
  // bounds every total of the plan (each region fills part of one target
  // fragment): plan bytes, per-participant bytes, traffic and routes.
  Status CheckByteTotal() const;
  // Step 1: tensor sets and descriptors; fills tensors and the index.
  Status SelectTensors();
  // The threads this plan runs on (PlanOptions::threads, its size).
  void ChooseThreads();
  // Fragment tables and participants of both sides, with id order (the
  // sides on two threads when planning on several).
  void BuildFragmentTables();
  void BuildSourceTable(const PlanTensorIndex& index);
  void BuildTargetTable();
  // Step 2 for every tensor, after the source table (on its thread, while
  // the larger target table is built): tilings, their indexes, or the
  // error each tensor's intersection then reports in its turn.
  void BuildSourceTilings();
  // Step 2 under ReplicaPolicy::kReference, after the tilings (whose errors
  // come first): the reference groups replace them.
  void UseReferenceTilings();
  // Steps 2-4: per tensor, the source tiling, candidates and regions.
  Status Intersect();
  Status IntersectTensor(uint32_t t);
  // Step 5: each region's serving fragment among its box's members.
  void Balance();
  // Step 6: base offsets, inner run and merged loops of every region, from
  // its source box (every member of a box has the box's offset and shape).
  void ComputeGeometry();
  // Step 7: totals, per-participant bytes, traffic and pipeline routes
  // (sums: the regions' order does not matter; segments are Geometry's).
  void Summarise();
  // The summary's compact columns of each side's fragments.
  void BuildSourceSummaryColumns();
  void BuildTargetSummaryColumns();
  // The sums of regions [begin, end).
  void SummariseRange(size_t begin, size_t end, const StageIds& source,
                      const StageIds& target,
                      const std::vector<uint32_t>& target_participant,
                      SummaryPart* out) const;

  const PlanSource& source_;
  const WeightPlacementManifest& target_;
  const PlanOptions& options_;
  std::shared_ptr<LogicalTransferPlan::Impl> impl_;
  unsigned threads_ = 1;  // 1 or 2: see ChooseThreads

  std::vector<const WeightPlacementPart*> target_parts_;
  std::vector<const TensorDescriptor*> plan_tensors_;  // target descriptors
  PlanTensorIndex tensor_index_;
  std::vector<std::vector<uint32_t>> source_by_tensor_;
  std::vector<std::vector<uint32_t>> target_by_tensor_;
  // The boxes of each tensor's source tiling (region i's is
  // box_by_id_[box_of_[i]]).
  std::vector<std::vector<SourceBox>> tensor_boxes_;
  // Per tensor, an index of each group of its boxes: one group (the
  // tiling) under the balanced policy; under the reference policy the
  // groups of ReferenceTiling, target DP rank d querying group d % size.
  std::vector<std::vector<BoxIndex>> box_index_;
  std::vector<Status> tiling_status_;  // SourceTiling's error, if any
  Status reference_status_;            // ReferenceTilings' error, if any
  // What the balance reads, in compact columns, as the steps before it
  // make them: the balance visits regions in random order. Boxes are
  // numbered tensor by tensor (tensor t's from tensor_first_[t]); box g's
  // members and their participants are [box_first_[g], box_first_[g + 1])
  // of member_ and member_participant_. Each region's box (box_of_) and
  // bytes are noted as the region is made.
  std::vector<uint32_t> tensor_first_, box_first_, member_, member_participant_,
      box_of_;
  std::vector<const SourceBox*> box_by_id_;  // boxes by that number
  std::vector<uint64_t> region_bytes_;       // the balance's keys in place
  // The summary's columns (Build*SummaryColumns).
  StageIds source_stages_, target_stages_;
  std::vector<uint32_t> target_participant_;
  // Compact column of source fragment -> participant: the loops touch
  // fragments in random order, and whole PlanFragments would miss the
  // cache each time.
  std::vector<uint32_t> source_participant_;
  // Target fragment i's box, compactly: offset at [2 * i * box_dims_,
  // + box_dims_), shape right after it; and its bytes. Intersection visits
  // the target fragments tensor by tensor, strided across the table; each
  // visit then costs one cache line rather than a fragment and two heap
  // arrays (measured 0.18 s of cold reads for Kimi-K2's 529,920 targets).
  size_t box_dims_ = 0;  // the largest ndim of the planned tensors
  std::vector<int64_t> target_box_;
  std::vector<uint64_t> target_nbytes_;
};

}  // namespace reshard::internal

#endif  // RESHARD_PLAN_PLANNER_H_
