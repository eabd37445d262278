// StoredWeightManifestFromJson. Property: the canonical JSON of a decoded
// manifest decodes to the same manifest (same key, same digest) and is a
// fixed point.

#include "fuzz/fuzz_check.h"
#include "reshard/stored_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto manifest =
      reshard::StoredWeightManifestFromJson(reshard::fuzz::AsView(data, size));
  if (!manifest.ok()) return 0;
  const std::string json = reshard::StoredWeightManifestToJson(*manifest);
  auto again = reshard::StoredWeightManifestFromJson(json);
  FUZZ_CHECK(again.ok(), "the canonical JSON of a manifest decodes");
  FUZZ_CHECK(again->manifest_key() == manifest->manifest_key(),
             "round trip keeps the manifest key");
  FUZZ_CHECK(again->manifest_digest() == manifest->manifest_digest(),
             "round trip keeps the digest");
  FUZZ_CHECK(reshard::StoredWeightManifestToJson(*again) == json,
             "the canonical JSON is a fixed point");
  return 0;
}
