// The safetensors header parser: the input is a whole file. Whatever it
// holds, parsing never reads outside it, and an accepted header describes
// tensors that tile the file's data exactly, each inside the file and
// aligned to its item size.

#include <algorithm>

#include "fuzz/fuzz_check.h"
#include "reshard/hf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file = reshard::fuzz::AsView(data, size);
  auto n = reshard::ParseSafetensorsPrefix("fuzz.safetensors",
                                           file.substr(0, 8), size);
  if (!n.ok()) return 0;
  FUZZ_CHECK(8 + *n <= size, "accepted header length past the file");
  auto h = reshard::ParseSafetensorsHeader("fuzz.safetensors",
                                           file.substr(8, *n), size);
  if (!h.ok()) return 0;
  uint64_t at = h->data_offset;
  for (const auto& t : h->tensors) {
    const auto* d = reshard::FindSafetensorsDtype(t.dtype);
    FUZZ_CHECK(d != nullptr, "accepted unknown dtype");
    const uint64_t begin = h->data_offset + t.begin;
    const uint64_t end = h->data_offset + t.end;
    FUZZ_CHECK(begin <= end && end <= size, "tensor outside the file");
    if (end == begin) continue;
    FUZZ_CHECK(begin % static_cast<uint64_t>(d->itemsize) == 0,
               "misaligned tensor accepted");
    FUZZ_CHECK(begin == at, "hole or overlap accepted");
    at = end;
  }
  FUZZ_CHECK(at == size, "data not tiled exactly");
  return 0;
}
