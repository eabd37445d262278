// The canonical JSON of a parameter's pieces, the one spelling the maps
// (EngineParametersToJson) and their fingerprints (declared_maps.cc) use.

#ifndef RESHARD_ENGINE_MAPS_JSON_H_
#define RESHARD_ENGINE_MAPS_JSON_H_

#include <vector>

#include "reshard/engine.h"
#include "util/canonical_json.h"

namespace reshard::internal {

// [{"fill"?, "fragment", "nbytes", "offset"}, ...]: "fill" (the element's
// bytes in lowercase hex) only on fill pieces, "fragment" null on padding.
void WritePiecesJson(const std::vector<ParameterPiece>& pieces,
                     CanonicalJsonWriter* w);

}  // namespace reshard::internal

#endif  // RESHARD_ENGINE_MAPS_JSON_H_
