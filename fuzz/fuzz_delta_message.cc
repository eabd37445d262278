// DecodeDeltaMessage on what a peer could send. The input is a shape and a
// message: byte 0 is the region count (1 to 4), then per region one byte
// picking its itemsize (1, 2, 4 or 8) and two bytes of element count (at
// most 4095), then the message (base generation 7). Properties: decoding
// never writes outside a region (the callback checks every piece), decoding
// straight into contiguous regions and through the callback give the same
// status and the same bytes, a region whose base check fails keeps its
// bytes (the check here accepts a base hash of 0 only), and an accepted
// message's result re-encodes (every scan alike) into a message that
// decodes to the same bytes.

#include <algorithm>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "live/delta_codec.h"

namespace {

using reshard::Status;
using reshard::live_internal::DecodeDeltaMessage;
using reshard::live_internal::DeltaMode;

constexpr uint64_t kGeneration = 7;

// The initial bytes of region r (what the target held before the message).
std::vector<uint8_t> Initial(uint64_t bytes, size_t r) {
  std::vector<uint8_t> v(bytes);
  for (uint64_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i * 7 + r);
  return v;
}

// Decodes `message` into fresh copies of the initial regions, directly or
// through the callback; with `checked`, only regions on a base hash of 0
// (others are listed in *refused).
Status Decode(const std::vector<uint8_t>& message,
              const std::vector<uint64_t>& sizes,
              const std::vector<uint32_t>& items, bool direct,
              std::vector<std::vector<uint8_t>>* regions,
              std::vector<size_t>* refused = nullptr) {
  regions->clear();
  std::vector<uint8_t*> into;
  for (size_t r = 0; r < sizes.size(); ++r) {
    regions->push_back(Initial(sizes[r], r));
    into.push_back(regions->back().data());
  }
  std::vector<DeltaMode> modes;
  const reshard::live_internal::DeltaBase base = [&](size_t r, uint64_t hash) {
    if (hash == 0) return true;
    refused->push_back(r);
    return false;
  };
  return DecodeDeltaMessage(
      message.data(), message.size(), kGeneration, sizes, items,
      [&](size_t r, uint64_t offset, const uint8_t* bytes, uint64_t length) {
        FUZZ_CHECK(r < sizes.size(), "a piece names a region of the message");
        FUZZ_CHECK(offset <= sizes[r] && length <= sizes[r] - offset,
                   "a piece lies within its region");
        FUZZ_CHECK(offset % items[r] == 0 && length % items[r] == 0,
                   "a piece is whole elements");
        FUZZ_CHECK(length > 0, "a piece is not empty");
        std::memcpy((*regions)[r].data() + offset, bytes, length);
      },
      &modes, direct ? &into : nullptr, refused != nullptr ? &base : nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t count = 1 + data[0] % 4;
  if (size < 1 + 3 * count) return 0;
  std::vector<uint64_t> sizes;
  std::vector<uint32_t> items;
  for (size_t r = 0; r < count; ++r) {
    const uint8_t* p = data + 1 + 3 * r;
    const uint32_t item = 1u << (p[0] % 4);
    const uint64_t elements = (p[1] | uint64_t{p[2]} << 8) % 4096;
    items.push_back(item);
    sizes.push_back(elements * item);
  }
  const std::vector<uint8_t> message(data + 1 + 3 * count, data + size);
  std::vector<std::vector<uint8_t>> direct, called;
  const Status a = Decode(message, sizes, items, true, &direct);
  const Status b = Decode(message, sizes, items, false, &called);
  FUZZ_CHECK(a.code() == b.code() && a.message() == b.message(),
             "both decode paths give the same status");
  FUZZ_CHECK(direct == called, "both decode paths land the same bytes");
  std::vector<std::vector<uint8_t>> checked;
  std::vector<size_t> refused;
  const Status c = Decode(message, sizes, items, true, &checked, &refused);
  if (a.ok() && c.ok()) {
    for (size_t r = 0; r < count; ++r) {
      const bool skipped =
          std::find(refused.begin(), refused.end(), r) != refused.end();
      FUZZ_CHECK(checked[r] == (skipped ? Initial(sizes[r], r) : direct[r]),
                 "a region is applied where its base checks, kept where not");
    }
  }
  if (!a.ok()) return 0;
  for (auto scan : {reshard::live_internal::DeltaScan::kBest,
                    reshard::live_internal::DeltaScan::kPortable}) {
    std::vector<uint8_t> again;
    reshard::live_internal::BeginDeltaMessage(static_cast<uint32_t>(count),
                                              kGeneration, &again);
    for (size_t r = 0; r < count; ++r) {
      std::vector<uint8_t> base = Initial(sizes[r], r);
      reshard::live_internal::DeltaRegionEncoder encoder(
          base.data(), sizes[r], items[r], r, &again, scan);
      encoder.Piece(direct[r].data(), 0, sizes[r]);
      uint64_t changed = 0, hash = 0;
      (void)encoder.Finish(&changed, &hash);
      FUZZ_CHECK(base == direct[r], "the encoder brings its base up to date");
    }
    std::vector<std::vector<uint8_t>> decoded;
    FUZZ_CHECK(Decode(again, sizes, items, true, &decoded).ok(),
               "a re-encoded message decodes");
    FUZZ_CHECK(decoded == direct, "a re-encoded message lands the same bytes");
  }
  return 0;
}
