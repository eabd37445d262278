// Canonical JSON encoders for the placement types, shared by identities and
// the wire. Keys are emitted in sorted order by hand; the writer asserts it.

#ifndef RESHARD_CONTRACT_PLACEMENT_JSON_H_
#define RESHARD_CONTRACT_PLACEMENT_JSON_H_

#include "reshard/placement.h"
#include "util/canonical_json.h"

namespace reshard::internal {

void WriteRank(const ParallelRank& rank, CanonicalJsonWriter* w);
void WriteAxis(const ParallelAxis& axis, CanonicalJsonWriter* w);
void WriteTensor(const TensorDescriptor& t, CanonicalJsonWriter* w);
// The wire form of a fragment (with placement_fragment_id).
void WriteFragment(const PlacementFragment& f, CanonicalJsonWriter* w);
// {"participant_id":..,"rank":..}
void WriteParticipant(const TopologyParticipant& p, CanonicalJsonWriter* w);
// The wire form of the topology (with topology_id).
void WriteTopology(const ParallelTopology& t, CanonicalJsonWriter* w);

}  // namespace reshard::internal

#endif  // RESHARD_CONTRACT_PLACEMENT_JSON_H_
