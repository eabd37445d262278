// What a CheckpointWritePlan holds besides its files: the checkpoint as a
// placement (one participant holding every tensor whole) and the logical
// plan from the written placement to it, which names one source fragment
// for every byte of every file.

#ifndef RESHARD_HF_WRITE_PLAN_STATE_H_
#define RESHARD_HF_WRITE_PLAN_STATE_H_

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
  std::string source_placement_id;
  WeightPlacementManifest checkpoint;  // the target side of `plan`
  LogicalTransferPlan plan;
};

namespace internal {

// Natural order of tensor names: digit runs compare as numbers
// ("layers.2" < "layers.10"), everything else bytewise.
bool NaturalLess(std::string_view a, std::string_view b);

// The descriptor of `t` without parallel axes (a tensor held whole).
Result<TensorDescriptor> WholeTensorOf(const TensorDescriptor& t);

}  // namespace internal
}  // namespace reshard

#endif  // RESHARD_HF_WRITE_PLAN_STATE_H_
