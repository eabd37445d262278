// The encoding of a delta update's message (docs/live.md, "Delta
// updates"): the regions of one message, each as the elements that changed
// since the base generation, in whichever form is smallest.
//
//   message  u32 magic "RSD1", u32 region count, u64 base generation,
//            then each region in the message's order
//   region   u8 mode, 7 zero bytes, u64 payload bytes, u64 base hash (the
//            XXH3-64 of the region's bytes the change applies to; 0 for
//            kRaw), the payload
//   kRaw     the region's stream, all of it (dense change, or a target
//            whose base differs)
//   kRuns    runs of changed elements: LEB128 gap (elements since the end
//            of the previous run), LEB128 count, then count elements
//   kBitmap  ceil(n / 8) bytes, bit i (least significant first) set when
//            element i changed, then the changed elements in order
//
// Elements are compared as raw bytes of their itemsize, so any dtype
// works and the result is bit-exact. Every integer is little-endian.

#ifndef RESHARD_LIVE_DELTA_CODEC_H_
#define RESHARD_LIVE_DELTA_CODEC_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reshard/status.h"

namespace reshard::live_internal {

enum class DeltaMode : uint8_t { kRaw = 0, kRuns = 1, kBitmap = 2 };

constexpr uint32_t kDeltaMagic = 0x31445352;  // "RSD1"
constexpr uint64_t kDeltaMessageHeaderBytes = 16;
constexpr uint64_t kDeltaRegionHeaderBytes = 24;

// The largest message of regions of `region_bytes` in total, `regions` of
// them: every region raw.
uint64_t MaxDeltaMessageBytes(uint64_t region_bytes, uint64_t regions);

// Appends the message header.
void BeginDeltaMessage(uint32_t regions, uint64_t base_generation,
                       std::vector<uint8_t>* out);

// Appends `now` (n bytes) as a raw region.
void EncodeRawRegion(const uint8_t* now, uint64_t n, std::vector<uint8_t>* out);

// Appends a region that did not change (runs, none of them) on the base of
// XXH3-64 `base_hash`.
void EncodeUnchangedRegion(uint64_t base_hash, std::vector<uint8_t>* out);

// Appends one region's change from its snapshot `base` to the bytes it
// holds now, fed piece by piece in stream order (a strided source's rows
// are scanned where they lie, never packed first). Each changed element is
// written into `base` as it is found, so that `base` equals what the
// region holds now when Finish returns; the run values are then read from
// `base`, and the XXH3-64 of the new base is computed on the way (the next
// update's base hash, without another pass over the bytes).
// How DeltaRegionEncoder compares: the fastest the CPU has (AVX-512
// where present), or the portable word loop only (both give the same
// message; tests compare them).
enum class DeltaScan { kBest, kPortable };

class DeltaRegionEncoder {
 public:
  // `base`: the region's snapshot, n bytes, a multiple of `itemsize`
  // (elements compare as raw bytes of that size), whose XXH3-64 is
  // `base_hash` (written into the region's header: a target applies the
  // change only onto bytes of that hash). Appends to `out`.
  DeltaRegionEncoder(uint8_t* base, uint64_t n, uint32_t itemsize,
                     uint64_t base_hash, std::vector<uint8_t>* out,
                     DeltaScan scan = DeltaScan::kBest);
  ~DeltaRegionEncoder();
  DeltaRegionEncoder(const DeltaRegionEncoder&) = delete;
  DeltaRegionEncoder& operator=(const DeltaRegionEncoder&) = delete;

  // The region's bytes [position, position + bytes) as they are now.
  // Pieces come in order, cover the region once, and start and end on
  // element boundaries.
  void Piece(const uint8_t* now, uint64_t position, uint64_t bytes);

  // Chooses the smallest form (runs, bitmap, or the raw region) and
  // finishes the region in `out`. Sets *changed to the changed elements
  // and *base_hash to the XXH3-64 of the new base.
  DeltaMode Finish(uint64_t* changed, uint64_t* base_hash);

 private:
  void Changed(uint64_t element);
  void Run(uint64_t first, uint64_t count);
  // Compares [position, position + bytes) with the base and returns the
  // bytes scanned (the rest is under a word): Scan picks ScanVector
  // (AVX-512, whole 64-byte blocks) where the CPU has it, then ScanBlocks
  // (portable, 32 then 8 bytes at a time) for what is left.
  template <uint32_t kItem>
  uint64_t Scan(const uint8_t* now, uint64_t position, uint64_t bytes);
  template <uint32_t kItem>
  uint64_t ScanVector(const uint8_t* now, uint64_t position, uint64_t bytes);
  template <uint32_t kItem>
  uint64_t ScanBlocks(const uint8_t* now, uint64_t position, uint64_t bytes);

  uint8_t* base_;
  uint64_t n_;
  uint64_t base_hash_;
  uint32_t item_;
  std::vector<uint8_t>* out_;
  bool vector_;  // ScanVector where the CPU has it
  size_t at_;    // where the runs payload starts in *out_
  size_t end_;   // where the next run goes
  uint64_t run_start_ = 0, run_length_ = 0, runs_end_ = 0, changed_ = 0;
  void* hash_;  // XXH3_state_t
};

// The one-piece form of DeltaRegionEncoder: `now` is the whole region.
DeltaMode EncodeDeltaRegion(const uint8_t* now, uint8_t* base, uint64_t n,
                            uint32_t itemsize, std::vector<uint8_t>* out,
                            uint64_t* changed, uint64_t base_hash = 0);

// Reads a message of `size` bytes: checks the header (magic, `regions`,
// `base_generation`), then for region i calls apply(i, offset, bytes,
// length) for every changed piece, offsets within the region's stream of
// region_bytes[i] bytes. With `direct`, a region i whose (*direct)[i] is
// not null is a contiguous stream there: its pieces are copied to it
// without a call to `apply`. With `base`, a region that is not raw is
// applied only if base(i, its base hash) returns true (the target holds
// that base); otherwise it is skipped whole (its mode is still listed).
// Errors (DataLoss) name what is malformed; pieces already applied stay
// applied.
using DeltaApply = std::function<void(size_t region, uint64_t offset,
                                      const uint8_t* bytes, uint64_t length)>;
using DeltaBase = std::function<bool(size_t region, uint64_t base_hash)>;
Status DecodeDeltaMessage(const uint8_t* data, uint64_t size,
                          uint64_t base_generation,
                          const std::vector<uint64_t>& region_bytes,
                          const std::vector<uint32_t>& itemsizes,
                          const DeltaApply& apply,
                          std::vector<DeltaMode>* modes,
                          const std::vector<uint8_t*>* direct = nullptr,
                          const DeltaBase* base = nullptr);

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_DELTA_CODEC_H_
