// The codec of the placement wire's sub-objects (docs/wire-format.md): one
// writer and one strict reader per type, shared by the placement wire, the
// identities, stored manifests and legacy inventories.
//
// Writers emit canonical JSON, keys in sorted order by hand (the writer
// asserts it). Readers check the exact field set, then every rule of the
// type's factory, and name the offending field by its path.

#ifndef RESHARD_CONTRACT_PLACEMENT_CODEC_H_
#define RESHARD_CONTRACT_PLACEMENT_CODEC_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "reshard/placement.h"
#include "util/canonical_json.h"
#include "util/json_reader.h"

namespace reshard::internal {

// Writers.
void WriteRank(const ParallelRank& rank, CanonicalJsonWriter* w);
void WriteAxis(const ParallelAxis& axis, CanonicalJsonWriter* w);
void WriteTensor(const TensorDescriptor& t, CanonicalJsonWriter* w);
// The wire form of a fragment (with placement_fragment_id).
void WriteFragment(const PlacementFragment& f, CanonicalJsonWriter* w);
// {"participant_id":..,"rank":..}
void WriteParticipant(const TopologyParticipant& p, CanonicalJsonWriter* w);
// The wire form of the topology (with topology_id).
void WriteTopology(const ParallelTopology& t, CanonicalJsonWriter* w);

// Readers of the element at `path`.
Result<ParallelRank> ReadRank(JsonElement e, const JsonPath& path);
Result<ParallelAxis> ReadAxis(JsonElement e, const JsonPath& path);
Result<TensorDescriptor> ReadTensor(JsonElement e, const JsonPath& path);
// `shared_id`, if given, returns the id a known tensor's fragments share
// (null for an unknown one, which the fragment then copies).
using SharedTensorIds =
    std::function<std::shared_ptr<const std::string>(std::string_view)>;
Result<PlacementFragment> ReadFragment(JsonElement e, const JsonPath& path,
                                       const SharedTensorIds& shared_id = {});
Result<ParallelTopology> ReadTopology(JsonElement e, const JsonPath& path);

}  // namespace reshard::internal

#endif  // RESHARD_CONTRACT_PLACEMENT_CODEC_H_
