// ImportLegacyInventories. Input: the grid sizes in the first byte (two
// bits each for tp, pp, ep, dp: 1..4) then the inventories separated by
// NUL bytes. Property: an accepted import yields a placement and bindings
// that validate and survive their canonical round trips.

#include "fuzz/fuzz_check.h"
#include "reshard/legacy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  reshard::LegacyImportOptions options;
  options.sizes.tp = 1 + (data[0] & 3);
  options.sizes.pp = 1 + ((data[0] >> 2) & 3);
  options.sizes.ep = 1 + ((data[0] >> 4) & 3);
  options.sizes.dp = 1 + ((data[0] >> 6) & 3);
  const auto inventories =
      reshard::fuzz::SplitAtNul(reshard::fuzz::AsView(data + 1, size - 1));
  auto imported = reshard::ImportLegacyInventories(inventories, options);
  if (!imported.ok()) return 0;
  const std::string wire = reshard::WeightPlacementToJson(imported->placement);
  auto placement = reshard::WeightPlacementFromJson(wire);
  FUZZ_CHECK(placement.ok(), "the imported placement's wire decodes");
  FUZZ_CHECK(placement->digest() == imported->placement.digest(),
             "round trip keeps the digest");
  FUZZ_CHECK(
      reshard::ValidateRuntimeBindings(imported->placement, imported->bindings)
          .ok(),
      "imported bindings validate against the imported placement");
  for (const auto& b : imported->bindings) {
    auto again = reshard::WeightRuntimeBindingFromJson(
        reshard::WeightRuntimeBindingToJson(b));
    FUZZ_CHECK(again.ok(), "an imported binding's wire decodes");
  }
  return 0;
}
