// Binding: a logical plan plus the live runtime bindings of both sides
// becomes an executable BoundTransferPlan of absolute addresses. Everything is
// checked before any byte moves; re-binding after an address change reuses
// the logical plan and never re-plans.

#ifndef RESHARD_BOUND_PLAN_H_
#define RESHARD_BOUND_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/status.h"

namespace reshard {

// One region with absolute addresses: copy `inner_bytes` contiguous bytes
// for every index of `loops` (outermost first), from
// source_address + sum(i * source_stride) to
// target_address + sum(i * target_stride).
struct BoundRegion {
  uint64_t source_address = 0;
  uint64_t target_address = 0;
  uint64_t inner_bytes = 0;
  std::vector<OuterLoop> loops;
  uint64_t bytes = 0;
  uint32_t region = 0;  // index into the logical plan's regions()
};

class BoundTransferPlan {
 public:
  // Checks that the plan was made for these placements (ids), that the
  // bindings are valid for their placements (rules 29-38), requires a binding
  // for every fragment a region touches, and rejects in-place reshard
  // (source and target storage overlapping in one address space).
  // Checks each side's bindings once (CheckedBindings::Make, coverage
  // kSubset; errors prefixed "source bindings: " or "target bindings: "),
  // then binds as below.
  static Result<BoundTransferPlan> Bind(
      const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
      const std::vector<WeightRuntimeBindingManifest>& source_bindings,
      const WeightPlacementManifest& target,
      const std::vector<WeightRuntimeBindingManifest>& target_bindings);
  // The same with bindings checked already: no binding is checked again,
  // only that each side's were checked for its placement.
  static Result<BoundTransferPlan> Bind(const LogicalTransferPlan& plan,
                                        const WeightPlacementManifest& source,
                                        const CheckedBindings& source_bindings,
                                        const WeightPlacementManifest& target,
                                        const CheckedBindings& target_bindings);

  // Binds `plan` again after some buffers moved: the bindings this plan
  // was bound with, each binding of `source_bindings` and
  // `target_bindings` in the place of its participant's
  // (CheckedBindings::Replace: only a binding that changed is checked).
  Result<BoundTransferPlan> Rebind(
      const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
      const std::vector<WeightRuntimeBindingManifest>& source_bindings,
      const WeightPlacementManifest& target,
      const std::vector<WeightRuntimeBindingManifest>& target_bindings) const;

  const std::vector<BoundRegion>& regions() const;
  uint64_t bytes() const;

  // Generation and lease fence (rules 57-60), checked right before
  // execution: the current bindings of every participant the plan uses must
  // still carry the planned instance, generation and lease, and every used
  // fragment must be physically unchanged. Fails closed, naming the
  // participant or fragment ("acquired runtime binding generation differs
  // from plan", "stale target fragment: <id>", ...).
  Status CheckCurrent(
      const std::vector<WeightRuntimeBindingManifest>& source_bindings,
      const std::vector<WeightRuntimeBindingManifest>& target_bindings) const;

  // The same fence restricted to the participants named in `source_scope`
  // and `target_scope` (a live rank fences the participants it hosts).
  Status CheckCurrentFor(
      const std::vector<std::string>& source_scope,
      const std::vector<WeightRuntimeBindingManifest>& source_bindings,
      const std::vector<std::string>& target_scope,
      const std::vector<WeightRuntimeBindingManifest>& target_bindings) const;

  // Every fragment the plan reads or writes lives in memory of a kind in
  // `supported`; otherwise FailedPrecondition naming the side, fragment,
  // participant and device. An executor calls it before moving anything,
  // so a device pointer is never copied as host memory.
  Status RequireMemoryKinds(const std::vector<MemoryKind>& supported,
                            std::string_view executor) const;

 private:
  struct State;
  explicit BoundTransferPlan(std::shared_ptr<const State> state)
      : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

}  // namespace reshard

#endif  // RESHARD_BOUND_PLAN_H_
