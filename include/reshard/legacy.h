// Legacy inputs the specification keeps working: flat per-process runtime
// inventories (the `runtime_v1` shape exported by earlier adapters, one file
// per participant) converted into a typed placement and typed bindings.

#ifndef RESHARD_LEGACY_H_
#define RESHARD_LEGACY_H_

#include <string>
#include <string_view>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard {

struct LegacyImportOptions {
  // The runtime's declared sizes; participants are the full grid.
  ParallelSizes sizes;
  // Defaults to "<model_id>-legacy".
  std::string placement_set_id;
};

struct LegacyImport {
  WeightPlacementManifest placement;
  std::vector<WeightRuntimeBindingManifest> bindings;
  // `bindings`, checked once for `placement` (every owner bound): Reshard
  // and the store take them without checking them again.
  CheckedBindings checked;
};

// Converts inventories (JSON text, one per participant) into a complete,
// validated placement and one binding per inventory. Axis semantics of the
// legacy `parallel_axes` entries `{kind, split_dim}`: an integer split_dim
// is a split; null means replicated for dp and tp, ownership for pp, and for
// ep ownership when the tensor has an expert_id, else replicated. A legacy
// one-dimensional `partition_dim = d` (with empty `shard_dims`) is accepted
// as `shard_dims = [d]` with a TP split on d. `is_contiguous: false`
// rejects the view.
Result<LegacyImport> ImportLegacyInventories(
    const std::vector<std::string_view>& inventories,
    const LegacyImportOptions& options);

}  // namespace reshard

#endif  // RESHARD_LEGACY_H_
