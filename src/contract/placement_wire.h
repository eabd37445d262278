// The placement decoder's reader of canonical input (contract/
// canonical_parts.h), exposed to its tests.

#ifndef RESHARD_CONTRACT_PLACEMENT_WIRE_H_
#define RESHARD_CONTRACT_PLACEMENT_WIRE_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "reshard/placement.h"
#include "util/sha256.h"

namespace reshard::internal {

// A placement spec read from exactly canonical parts, and the wire's
// prefix {"parts":[...] those parts were read from: a view of the input,
// or a hasher that has seen it (when the input's pages were given back).
struct CanonicalSpec {
  WeightPlacementManifestSpec spec;
  std::string_view prefix;
  std::optional<Sha256> prefix_hash;
};

// Reads a placement wire whose parts are exactly canonical; nullopt if they
// are not, or if anything about the document is wrong (the general decoder
// then decodes it and words the error).
//
// With `released`, the caller owns the memory of `json` and reads it no
// more: for a large document the prefix is hashed while the parts are
// scanned and the pages of every scanned run are given back to the system
// (they read as zeros afterwards); *released tells whether any was, also
// when nullopt is returned (the text is then no longer intact).
std::optional<CanonicalSpec> ReadCanonicalPlacement(std::string_view json,
                                                    bool* released = nullptr);

// The decoder's entry for owners of the text.
class PlacementDecoder {
 public:
  // WeightPlacementFromJson of `json`, which this takes: the text's pages
  // go back to the system as its parts are decoded, so a large placement's
  // peak memory is its decoded form and a few MB of text, not both whole.
  // If the text proves not canonical after some pages went, `reread`
  // supplies it again for the general decoder (a file is read again);
  // without `reread` nothing is given back.
  static Result<WeightPlacementManifest> FromOwnedJson(
      std::string json, const std::function<Result<std::string>()>& reread);
  // The same for the text of a file mapped privately (MappedFile), which
  // the caller keeps mapped until this returns: pages given back read the
  // file again, so a text found not canonical late is decoded from the
  // same view.
  static Result<WeightPlacementManifest> FromMappedJson(std::string_view json);
};

}  // namespace reshard::internal

#endif  // RESHARD_CONTRACT_PLACEMENT_WIRE_H_
