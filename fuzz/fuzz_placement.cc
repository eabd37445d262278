// WeightPlacementFromJson: the strict placement decoder. Property: a
// decoded placement re-encodes to a wire that decodes to the same
// placement (same id, same digest) and re-encodes byte for byte.

#include "fuzz/fuzz_check.h"
#include "reshard/placement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto placement =
      reshard::WeightPlacementFromJson(reshard::fuzz::AsView(data, size));
  if (!placement.ok()) return 0;
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
