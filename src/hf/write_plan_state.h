// What a CheckpointWritePlan holds besides its files: the checkpoint as a
// placement (one participant holding every tensor whole) and the logical
// plan from the written placement to it, which names one source fragment
// for every byte of every file.

#ifndef RESHARD_HF_WRITE_PLAN_STATE_H_
#define RESHARD_HF_WRITE_PLAN_STATE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reshard/hf.h"
#include "reshard/plan.h"

namespace reshard {

struct CheckpointWritePlan::State {
  std::vector<CheckpointWriteFile> files;
  std::vector<CheckpointWriteTensor> tensors;  // sorted by name
  std::string index_json;
  uint64_t tensor_bytes = 0;
  std::string source_placement_id;     // empty for a stored source
  WeightPlacementManifest checkpoint;  // the target side of `plan`
  std::optional<LogicalTransferPlan> plan;
};

namespace internal {

// Natural order of tensor names: digit runs compare as numbers
// ("layers.2" < "layers.10"), everything else bytewise.
bool NaturalLess(std::string_view a, std::string_view b);

// The descriptor of `t` without parallel axes (a tensor held whole).
Result<TensorDescriptor> WholeTensorOf(const TensorDescriptor& t);

// The files of a checkpoint of `tensors` (see PlanCheckpointWrite), with
// the checkpoint as a placement under `header`; no plan yet.
Result<std::shared_ptr<CheckpointWritePlan::State>> PlanCheckpointFiles(
    const std::vector<TensorDescriptor>& tensors, PlacementHeader header,
    const CheckpointWriteOptions& options);

}  // namespace internal
}  // namespace reshard

#endif  // RESHARD_HF_WRITE_PLAN_STATE_H_
