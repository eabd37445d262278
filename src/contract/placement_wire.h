// The placement decoder's reader of canonical input (contract/
// canonical_parts.h), exposed to its tests.

#ifndef RESHARD_CONTRACT_PLACEMENT_WIRE_H_
#define RESHARD_CONTRACT_PLACEMENT_WIRE_H_

#include <optional>
#include <string_view>

#include "reshard/placement.h"

namespace reshard::internal {

// A placement spec read from exactly canonical parts, and the wire's
// prefix {"parts":[...] those parts were read from (a view of the input).
struct CanonicalSpec {
  WeightPlacementManifestSpec spec;
  std::string_view prefix;
};

// Reads a placement wire whose parts are exactly canonical; nullopt if they
// are not, or if anything about the document is wrong (the general decoder
// then decodes it and words the error).
std::optional<CanonicalSpec> ReadCanonicalPlacement(std::string_view json);

}  // namespace reshard::internal

#endif  // RESHARD_CONTRACT_PLACEMENT_WIRE_H_
