// Internal to the live layer: XXH3-64 of a region's bytes as they stream
// (row by row, where its rows lie), the hash every verification of a live
// session and every delta base compare.
#ifndef RESHARD_LIVE_REGION_HASH_H_
#define RESHARD_LIVE_REGION_HASH_H_

#include <cstdint>
#include <vector>

#include "bind/strided_stream.h"
#include "reshard/bound_plan.h"

namespace reshard::live_internal {

// XXH3-64 of `side`'s stream, read where its rows lie: the same value as
// the hash of the packed stream, so a region hashes alike on its source
// and its target side whatever their strides. `state` is scratch for
// strided sides (an XXH3_state_t).
uint64_t HashSide(const internal::StridedSide& side, void* state);

enum class RegionSide : uint8_t { kSource, kTarget };

// HashSide of `region`'s `side` (merged into as few runs as possible).
uint64_t HashRegion(const BoundRegion& region, RegionSide side, void* state);

// out[i] = the hash of regions[i]'s `side`, on up to `threads` threads
// (0: one per 256 MiB, at most the machine's cores and 8) in shares of
// about equal bytes.
void HashRegions(const std::vector<const BoundRegion*>& regions,
                 RegionSide side, uint32_t threads, uint64_t* out);

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_REGION_HASH_H_
