// Readers of the placement wire's sub-objects, shared with other decoders
// (stored manifests, legacy inventories).

#ifndef RESHARD_CONTRACT_PLACEMENT_WIRE_INTERNAL_H_
#define RESHARD_CONTRACT_PLACEMENT_WIRE_INTERNAL_H_

#include "reshard/placement.h"
#include "util/json_reader.h"

namespace reshard::internal {

Result<ParallelRank> ReadRank(JsonElement e, const JsonPath& path);
Result<ParallelAxis> ReadAxis(JsonElement e, const JsonPath& path);
Result<TensorDescriptor> ReadTensor(JsonElement e, const JsonPath& path);
Result<PlacementFragment> ReadFragment(JsonElement e, const JsonPath& path);
Result<ParallelTopology> ReadTopology(JsonElement e, const JsonPath& path);

// Rules 7-9 of one fragment against its tensor.
Status CheckFragmentGeometry(const TensorDescriptor& t,
                             const PlacementFragment& f);

}  // namespace reshard::internal

#endif  // RESHARD_CONTRACT_PLACEMENT_WIRE_INTERNAL_H_
