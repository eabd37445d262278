// CanonicalizeJson (and the strict reader under every decoder). Properties:
// canonical output is a fixed point in both modes, and the ASCII mode
// emits ASCII only.

#include "fuzz/fuzz_check.h"
#include "reshard/json.h"
#include "util/json_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = reshard::fuzz::AsView(data, size);
  (void)reshard::internal::JsonDocument::Parse(text);
  using reshard::JsonAscii;
  for (JsonAscii mode : {JsonAscii::kEscapeNonAscii, JsonAscii::kRawUtf8}) {
    const bool ascii = mode == JsonAscii::kEscapeNonAscii;
    auto canonical = reshard::CanonicalizeJson(text, mode);
    if (!canonical.ok()) continue;
    auto again = reshard::CanonicalizeJson(*canonical, mode);
    FUZZ_CHECK(again.ok(), "canonical JSON is accepted");
    FUZZ_CHECK(*again == *canonical, "canonical JSON is a fixed point");
    if (ascii) {
      for (char c : *canonical) {
        FUZZ_CHECK(static_cast<unsigned char>(c) < 0x80,
                   "ensure_ascii output is ASCII");
      }
    }
  }
  return 0;
}
