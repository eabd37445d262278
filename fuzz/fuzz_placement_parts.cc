// The placement decoder's parts (rank, axis, tensor, fragment, topology),
// each applied to the same document, so a small input reaches every part
// without a whole valid placement around it.

#include "contract/placement_codec.h"
#include "fuzz/fuzz_check.h"
#include "util/json_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using reshard::internal::JsonDocument;
  using reshard::internal::JsonPath;
  auto doc = JsonDocument::Parse(reshard::fuzz::AsView(data, size));
  if (!doc.ok()) return 0;
  const JsonPath root;
  (void)reshard::internal::ReadRank(doc->root(), root);
  (void)reshard::internal::ReadAxis(doc->root(), root);
  (void)reshard::internal::ReadTensor(doc->root(), root);
  (void)reshard::internal::ReadFragment(doc->root(), root);
  (void)reshard::internal::ReadTopology(doc->root(), root);
  return 0;
}
