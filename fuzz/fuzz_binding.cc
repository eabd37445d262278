// WeightRuntimeBindingFromJson. Property: the canonical wire of a decoded
// binding decodes again and is a fixed point.

#include "fuzz/fuzz_check.h"
#include "reshard/binding.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto binding =
      reshard::WeightRuntimeBindingFromJson(reshard::fuzz::AsView(data, size));
  if (!binding.ok()) return 0;
  const std::string wire = reshard::WeightRuntimeBindingToJson(*binding);
  auto again = reshard::WeightRuntimeBindingFromJson(wire);
  FUZZ_CHECK(again.ok(), "the canonical wire of a binding decodes");
  FUZZ_CHECK(reshard::WeightRuntimeBindingToJson(*again) == wire,
             "the canonical wire is a fixed point");
  return 0;
}
