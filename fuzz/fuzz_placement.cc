// WeightPlacementFromJson: the strict placement decoder. Properties: a
// decoded placement re-encodes to a wire that decodes to the same
// placement (same id, same digest) and re-encodes byte for byte; and the
// reader of canonical input agrees with the general decoder (which reads
// the same text after a leading space, never canonical) on success,
// identities and, for text shaped like a placement wire, the error.

#include "fuzz/fuzz_check.h"
#include "reshard/placement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = reshard::fuzz::AsView(data, size);
  auto placement = reshard::WeightPlacementFromJson(input);
  auto general = reshard::WeightPlacementFromJson(" " + std::string(input));
  FUZZ_CHECK(placement.ok() == general.ok(),
             "both decoders accept or both reject");
  if (!placement.ok()) {
    if (input.starts_with("{\"parts\":[")) {
      FUZZ_CHECK(placement.status().message() == general.status().message(),
                 "both decoders report the same error");
    }
    return 0;
  }
  FUZZ_CHECK(general->placement_id() == placement->placement_id(),
             "both decoders compute the same placement id");
  FUZZ_CHECK(general->digest() == placement->digest(),
             "both decoders compute the same digest");
  const std::string wire = reshard::WeightPlacementToJson(*placement);
  auto again = reshard::WeightPlacementFromJson(wire);
  FUZZ_CHECK(again.ok(), "the canonical wire of a placement decodes");
  FUZZ_CHECK(again->placement_id() == placement->placement_id(),
             "round trip keeps the placement id");
  FUZZ_CHECK(again->digest() == placement->digest(),
             "round trip keeps the digest");
  FUZZ_CHECK(reshard::WeightPlacementToJson(*again) == wire,
             "the canonical wire is a fixed point");
  return 0;
}
