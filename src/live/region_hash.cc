#include "live/region_hash.h"

#include <xxhash.h>
#if RESHARD_HAVE_XXH_DISPATCH
// Routes XXH3_64bits* to the run-time AVX2/AVX-512 dispatcher.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <memory>
#include <thread>

#include "util/byte_shares.h"

namespace reshard::live_internal {

uint64_t HashSide(const internal::StridedSide& side, void* state) {
  if (side.contiguous()) return XXH3_64bits(side.base, side.total_bytes);
  auto* s = static_cast<XXH3_state_t*>(state);
  XXH3_64bits_reset(s);
  internal::ForEachStreamRow(side, [&](const uint8_t* p, uint64_t, uint64_t n) {
    XXH3_64bits_update(s, p, n);
  });
  return XXH3_64bits_digest(s);
}

uint64_t HashRegion(const BoundRegion& region, RegionSide side, void* state) {
  const auto s = side == RegionSide::kSource
                     ? internal::StridedSide::Source(region).Merged()
                     : internal::StridedSide::Target(region).Merged();
  return HashSide(s, state);
}

namespace {

void HashShare(const std::vector<const BoundRegion*>& regions, size_t first,
               size_t last, RegionSide side, uint64_t* out) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(
      XXH3_createState(), &XXH3_freeState);
  for (size_t i = first; i < last; ++i) {
    out[i] = HashRegion(*regions[i], side, state.get());
  }
}

}  // namespace

void HashRegions(const std::vector<const BoundRegion*>& regions,
                 RegionSide side, uint32_t threads, uint64_t* out) {
  uint64_t total = 0;
  for (const BoundRegion* r : regions) total += r->bytes;
  if (threads == 0) {
    const uint64_t by_size = 1 + total / (uint64_t{256} << 20);
    const uint64_t cores =
        std::clamp<uint64_t>(std::thread::hardware_concurrency(), 1, 8);
    threads = static_cast<uint32_t>(std::min(by_size, cores));
  }
  internal::RunInByteShares(
      regions.size(), threads, [&](size_t i) { return regions[i]->bytes; },
      [&](size_t first, size_t last) {
        HashShare(regions, first, last, side, out);
      });
}

}  // namespace reshard::live_internal
