// The N-D reshard planner: for every byte of every target fragment, which
// source fragment serves it, described as strided copies.
//
// A plan is an address-free value. Each region is one overlap box between
// one source fragment and one target fragment, described as a strided copy:
// a base byte offset on each side, `inner_bytes` contiguous on both sides,
// and outer loops (count, source stride, target stride) with count-1 loops
// dropped and adjacent loops merged whenever both sides allow it. A region
// is one operation for an executor that supports strided copies; it is
// never expanded into one operation per row. docs/planner.md describes the
// steps and the `reshard plan --json` keys.

#ifndef RESHARD_PLAN_H_
#define RESHARD_PLAN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/conversion.h"
#include "reshard/placement.h"
#include "reshard/status.h"
#include "reshard/stored_manifest.h"

namespace reshard {

namespace internal {
class Planner;  // builds plans (src/plan/planner.cc)
}  // namespace internal

// Bounds checked while planning, before any memory is committed to a plan.
// A segment cap belongs to executors that copy row by row, not here.
struct PlanningLimits {
  uint64_t max_transfer_regions = 1'000'000'000;
  uint64_t max_operations = 1'000'000'000;
};

// Where a plan's source fragments come from.
enum class PlanSourceKind {
  kPlacement,       // LogicalTransferPlan::Make: a live placement
  kStoredManifest,  // LogicalTransferPlan::MakeFromStored: a store revision
};

// Which copy of a source box serves a region when the source holds several
// (DP replicas, replicated axes, several owners; docs/planner.md, steps 2
// and 5).
enum class ReplicaPolicy {
  // The tiling most cover groups share; each region from the member whose
  // participant has served the fewest bytes so far: every replica serves.
  kBalanced,
  // The reference prototype's planner: target DP rank d reads the sorted
  // complete DP replicas' R[d mod |R|] (its smallest owner; a DP-owned
  // tensor its one owner), each box from its first copy by (dp, pp, ep, tp,
  // fragment id); intersected with that replica's own boxes. What
  // reshard.compat.mooncake plans by default. A stored source holds one
  // copy of each box: both policies plan it alike.
  kReference,
};

struct PlanOptions {
  PlanningLimits limits;
  ReplicaPolicy replica_policy = ReplicaPolicy::kBalanced;
  // Plan only this target participant's fragments (a local target).
  std::optional<std::string> target_participant_id;
  // Convert tensors whose dtype differs (docs/conversion.md): the plan then
  // fills conversion()->staging(), and the converting fragments are
  // computed from it. Without it any dtype difference is refused, naming
  // the first tensor whose dtype differs. Make only; MakeFromStored refuses
  // it (conversions out of a store revision are not supported yet).
  bool convert = false;
  // The FP8 block of quantized and dequantized weights.
  Fp8Block fp8_block;
  // Threads that plan: 0 (automatic) plans on up to kMaxPlanThreads of the
  // machine's cores when the placements hold at least
  // kParallelPlanFragments fragments, else on the calling thread; 1 always
  // on the calling thread; N > 1 on N whatever the size (today at most
  // two steps run at once). The plan is the same byte for byte whatever
  // the threads.
  uint32_t threads = 0;
  static constexpr uint32_t kMaxPlanThreads = 4;
  static constexpr size_t kParallelPlanFragments = size_t{1} << 16;
};

// One outer loop of a strided copy, outermost first.
struct OuterLoop {
  uint64_t count = 0;
  uint64_t source_stride = 0;
  uint64_t target_stride = 0;
  friend bool operator==(const OuterLoop&, const OuterLoop&) = default;
};

// One overlap between a source and a target fragment.
struct TransferRegion {
  uint32_t tensor = 0;           // index into LogicalTransferPlan::tensors()
  uint32_t source_fragment = 0;  // index into source_fragments()
  uint32_t target_fragment = 0;  // index into target_fragments()
  Dims overlap_offset;           // global coordinates
  Dims overlap_shape;
  uint64_t source_base_offset = 0;  // bytes from the fragment's first byte
  uint64_t target_base_offset = 0;
  uint64_t inner_bytes = 0;      // contiguous on both sides
  std::vector<OuterLoop> loops;  // merged, count > 1 only
  // Contiguous runs under the unmerged (row-by-row) geometry.
  uint64_t segments = 0;
  uint64_t bytes = 0;

  friend bool operator==(const TransferRegion&,
                         const TransferRegion&) = default;
};

// A fragment as the plan sees it: box, owner and where it came from.
//
// The two ids are views into the manifests the plan was made from, which
// every copy of the plan keeps alive: they are valid as long as the plan is.
// (A plan of a million fragments thus copies no id string.)
struct PlanFragment {
  // The placement fragment id: of the target placement, and of the source
  // placement for PlanSourceKind::kPlacement. For kStoredManifest sources it
  // is the stored fragment id (StoredFragment::stored_fragment_id).
  std::string_view fragment_id;
  // The owning participant; for a stored source, the payload object key.
  std::string_view participant_id;
  ParallelRank rank;  // all zero for a stored source
  std::optional<int64_t> pipeline_stage_id;
  uint32_t tensor = 0;
  Dims global_offset;
  Dims local_shape;
  uint64_t nbytes = 0;
  // Index of participant_id in the plan's participants of this side.
  uint32_t participant = 0;
  // Position of fragment_id in the id order of this side's fragments.
  uint32_t order = 0;
  friend bool operator==(const PlanFragment&, const PlanFragment&) = default;
};

// Operations grouped by pipeline route. Stages are -1 when unset;
// source_pp is -1 for a stored source.
struct PipelineRoute {
  int64_t source_pp = 0;
  int64_t source_stage = -1;
  int64_t target_pp = 0;
  int64_t target_stage = -1;
  uint64_t operations = 0;
  uint64_t bytes = 0;
  friend bool operator==(const PipelineRoute&, const PipelineRoute&) = default;
};

// Bytes moved from one source participant to one target participant.
struct TrafficEntry {
  uint32_t source_participant = 0;  // index into source_participants()
  uint32_t target_participant = 0;  // index into target_participants()
  uint64_t bytes = 0;
  friend bool operator==(const TrafficEntry&, const TrafficEntry&) = default;
};

struct PlanSummary {
  uint64_t regions = 0;
  uint64_t segments = 0;
  uint64_t operations = 0;
  uint64_t bytes = 0;
  uint64_t max_source_bytes = 0;
  // Total bytes over the source participants that hold fragments.
  double mean_source_bytes = 0;
  uint64_t max_target_bytes = 0;
  uint64_t source_fragments_used = 0;
};

// Calls visit(name, value) for every field of `s`, names sorted: the one
// statement of the summary's fields, which PlanSummaryToJson (the CLI's
// plan --json) and Python's plan.summary both write. mean_source_bytes is
// visited rounded to whole bytes.
template <typename Visit>
void VisitFields(const PlanSummary& s, Visit&& visit) {
  visit("bytes", s.bytes);
  visit("max_source_bytes", s.max_source_bytes);
  visit("max_target_bytes", s.max_target_bytes);
  visit("mean_source_bytes", static_cast<uint64_t>(s.mean_source_bytes + 0.5));
  visit("operations", s.operations);
  visit("regions", s.regions);
  visit("segments", s.segments);
  visit("source_fragments_used", s.source_fragments_used);
}

class LogicalTransferPlan {
 public:
  // Plans `target` from `source` (both validated placements).
  static Result<LogicalTransferPlan> Make(const WeightPlacementManifest& source,
                                          const WeightPlacementManifest& target,
                                          const PlanOptions& options = {});

  // Plans `target` from a committed store manifest: every stored fragment
  // is eligible; source "participants" are the payload objects.
  static Result<LogicalTransferPlan> MakeFromStored(
      const StoredWeightManifest& source, const WeightPlacementManifest& target,
      const PlanOptions& options = {});

  // Which of the two factories made the plan; it says what the source
  // side's PlanFragment::fragment_id and participant_id name.
  PlanSourceKind source_kind() const;

  // The conversions of a plan made with PlanOptions::convert, or nullptr
  // when no tensor converts. When set, target_placement_id() and the
  // target fragments are those of conversion()->staging(), which
  // Reshard binds in place of the target.
  const ConversionPlan* conversion() const;

  const std::string& resource_id() const;
  const std::string& revision() const;
  // The source placement_id, or "manifest:<manifest_key>" for a stored
  // source.
  const std::string& source_placement_id() const;
  const std::string& target_placement_id() const;
  const std::vector<std::string>& tensors() const;
  const std::vector<PlanFragment>& source_fragments() const;
  const std::vector<PlanFragment>& target_fragments() const;
  // Sorted by (target fragment id, target base offset, source fragment id,
  // source base offset).
  const std::vector<TransferRegion>& regions() const;
  const std::vector<PipelineRoute>& pipeline_routes() const;
  // Participant ids of each side, sorted, and the bytes each serves or
  // receives (aligned).
  const std::vector<std::string>& source_participants() const;
  const std::vector<uint64_t>& source_bytes() const;
  const std::vector<std::string>& target_participants() const;
  const std::vector<uint64_t>& target_bytes() const;
  // Non-zero entries, sorted by (source, target).
  const std::vector<TrafficEntry>& traffic() const;
  const PlanSummary& summary() const;

  // Human-readable one-line description of a region.
  std::string DescribeRegion(const TransferRegion& region) const;

 private:
  friend class internal::Planner;
  struct Impl;
  explicit LogicalTransferPlan(std::shared_ptr<const Impl> impl)
      : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The plan summary as one canonical JSON object: the `--json` of
// `reshard plan`, keys as listed in docs/planner.md.
std::string PlanSummaryToJson(const LogicalTransferPlan& plan);

}  // namespace reshard

#endif  // RESHARD_PLAN_H_
