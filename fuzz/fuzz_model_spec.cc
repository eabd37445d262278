// ModelSpecFromJson, the strict decoder of model spec files.

#include "fuzz/fuzz_check.h"
#include "reshard/gen.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)reshard::ModelSpecFromJson(reshard::fuzz::AsView(data, size));
  return 0;
}
