// The changed-element bitmap of a delta update (live/delta_codec.h, form
// kBitmap), one implementation for the CPU codec and the GPU kernels
// (exec_cuda/convert_kernels.h): bit j of the map (least significant bit
// first) is set when element j changed; elements compare as raw bytes of
// their itemsize. Header-only, C++17, RESHARD_HOST_DEVICE.
#ifndef RESHARD_UTIL_DELTA_BITS_H_
#define RESHARD_UTIL_DELTA_BITS_H_

#include <cstdint>

#include "util/float_math.h"  // RESHARD_HOST_DEVICE

namespace reshard::internal {

RESHARD_HOST_DEVICE inline bool DeltaBit(const uint8_t* map, uint64_t j) {
  return ((map[j / 8] >> (j % 8)) & 1) != 0;
}

RESHARD_HOST_DEVICE inline void SetDeltaBit(uint8_t* map, uint64_t j) {
  map[j / 8] = static_cast<uint8_t>(map[j / 8] | (1u << (j % 8)));
}

// The bits set in map bytes [first, end).
RESHARD_HOST_DEVICE inline uint64_t DeltaBitsSet(const uint8_t* map,
                                                 uint64_t first, uint64_t end) {
  uint64_t set = 0;
  for (uint64_t b = first; b < end; ++b) {
#if defined(__CUDA_ARCH__)
    set += static_cast<uint64_t>(__popc(map[b]));
#else
    set += static_cast<uint64_t>(__builtin_popcount(map[b]));
#endif
  }
  return set;
}

// Whether element `e` (of `item` bytes) differs between `now` and `base`.
RESHARD_HOST_DEVICE inline bool DeltaElementChanged(const uint8_t* now,
                                                    const uint8_t* base,
                                                    uint64_t e, uint32_t item) {
  const uint64_t at = e * item;
  for (uint32_t i = 0; i < item; ++i) {
    if (now[at + i] != base[at + i]) return true;
  }
  return false;
}

// Copies element `from_e` of `from` to element `to_e` of `to` (`item`
// bytes each).
RESHARD_HOST_DEVICE inline void DeltaCopyElement(const uint8_t* from,
                                                 uint64_t from_e, uint8_t* to,
                                                 uint64_t to_e, uint32_t item) {
  for (uint32_t i = 0; i < item; ++i)
    to[to_e * item + i] = from[from_e * item + i];
}

// Map byte `k` of a region of `elements` elements: the changed ones of
// elements [8k, 8k + 8) (none past the region).
RESHARD_HOST_DEVICE inline uint8_t DeltaMapByte(const uint8_t* now,
                                                const uint8_t* base,
                                                uint64_t elements,
                                                uint32_t item, uint64_t k) {
  uint32_t byte = 0;
  for (uint64_t j = 8 * k; j < 8 * k + 8 && j < elements; ++j) {
    if (DeltaElementChanged(now, base, j, item)) byte |= 1u << (j % 8);
  }
  return static_cast<uint8_t>(byte);
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_DELTA_BITS_H_
