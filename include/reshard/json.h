// Canonical JSON: the byte form of every reshard id and wire document.

#ifndef RESHARD_JSON_H_
#define RESHARD_JSON_H_

#include <string>
#include <string_view>

#include "reshard/status.h"

namespace reshard {

// How canonical JSON writes non-ASCII characters (Python's ensure_ascii).
enum class JsonAscii : bool {
  kEscapeNonAscii = true,  // ensure_ascii=True: ids and the placement wire
  kRawUtf8 = false,        // ensure_ascii=False: store manifests
};

// Re-encodes any JSON text exactly as Python's
// json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=...)
// would. Duplicate keys, NaN/Infinity and floating-point numbers (absent
// from the contract) are rejected.
Result<std::string> CanonicalizeJson(
    std::string_view text, JsonAscii mode = JsonAscii::kEscapeNonAscii);

}  // namespace reshard

#endif  // RESHARD_JSON_H_
