#include "live/delta_codec.h"

#include <xxhash.h>
#if RESHARD_HAVE_XXH_DISPATCH
// Routes XXH3_64bits* to the run-time AVX2/AVX-512 dispatcher.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstring>
#include <utility>

#include "util/delta_bits.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace reshard::live_internal {
namespace {

using internal::DeltaBit;
using internal::DeltaBitsSet;
using internal::SetDeltaBit;

// Little-endian integers, as every integer of a delta message is written.
void StoreLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> 8 * i);
}
uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

void PutU64(uint64_t v, std::vector<uint8_t>* out) {
  out->resize(out->size() + 8);
  StoreLe64(out->data() + out->size() - 8, v);
}
void PutU32(uint32_t v, std::vector<uint8_t>* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> 8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

uint8_t* PutVarintAt(uint64_t v, uint8_t* p) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}
// Reads a varint of at most 10 bytes from [*p, end); false when malformed.
bool GetLongVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    const uint8_t b = *(*p)++;
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return shift < 63 || (b & 0x7f) <= 1;
  }
  return false;
}
// GetLongVarint with the one-byte case (most gaps and counts) inline.
inline bool GetVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  if (*p < end && **p < 0x80) {
    *v = *(*p)++;
    return true;
  }
  return GetLongVarint(p, end, v);
}

void BeginRegion(DeltaMode mode, uint64_t payload, uint64_t base_hash,
                 std::vector<uint8_t>* out) {
  out->push_back(static_cast<uint8_t>(mode));
  out->insert(out->end(), 7, 0);
  PutU64(payload, out);
  PutU64(base_hash, out);
}

// Regions are scanned and hashed in chunks of this many bytes (rounded
// down to whole elements), so that the hash reads the new base while it
// is still in cache.
constexpr uint64_t kChunkBytes = 64 << 10;

// Whether DeltaRegionEncoder::ScanVector can run here.
#if defined(__x86_64__)
const bool kHasAvx512 = __builtin_cpu_supports("avx512bw");
#else
constexpr bool kHasAvx512 = false;
#endif

// A region's runs payload grows by at least this much at a time.
constexpr size_t kRunsStepBytes = 4 << 10;

}  // namespace

uint64_t MaxDeltaMessageBytes(uint64_t region_bytes, uint64_t regions) {
  return kDeltaMessageHeaderBytes + regions * kDeltaRegionHeaderBytes +
         region_bytes;
}

void BeginDeltaMessage(uint32_t regions, uint64_t base_generation,
                       std::vector<uint8_t>* out) {
  PutU32(kDeltaMagic, out);
  PutU32(regions, out);
  PutU64(base_generation, out);
}

void EncodeRawRegion(const uint8_t* now, uint64_t n,
                     std::vector<uint8_t>* out) {
  BeginRegion(DeltaMode::kRaw, n, 0, out);
  out->insert(out->end(), now, now + n);
}

void EncodeUnchangedRegion(uint64_t base_hash, std::vector<uint8_t>* out) {
  BeginRegion(DeltaMode::kRuns, 0, base_hash, out);
}

DeltaRegionEncoder::DeltaRegionEncoder(uint8_t* base, uint64_t n,
                                       uint32_t itemsize, uint64_t base_hash,
                                       std::vector<uint8_t>* out,
                                       DeltaScan scan)
    : base_(base),
      n_(n),
      base_hash_(base_hash),
      item_(std::max<uint32_t>(itemsize, 1)),
      out_(out),
      vector_(scan == DeltaScan::kBest && kHasAvx512),
      hash_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(hash_));
  BeginRegion(DeltaMode::kRuns, 0, base_hash_, out_);
  at_ = end_ = out_->size();
}

DeltaRegionEncoder::~DeltaRegionEncoder() {
  XXH3_freeState(static_cast<XXH3_state_t*>(hash_));
}

void DeltaRegionEncoder::Run(uint64_t first, uint64_t count) {
  const uint64_t bytes = count * item_;
  // Two varints, the values, and room for a 16-byte copy of short runs.
  const size_t need = end_ + 20 + std::max<uint64_t>(bytes, 16);
  if (need > out_->size()) {
    // Grown in steps, trimmed to end_ by Finish: no resize per run, and
    // little zero-filling per region (a region starts at the trimmed end).
    out_->resize(std::max<size_t>(need, out_->size() + kRunsStepBytes));
  }
  uint8_t* p = PutVarintAt(first - runs_end_, out_->data() + end_);
  p = PutVarintAt(count, p);
  // The base already holds the run's new values (written when scanned).
  // Most runs are an element or two: one fixed-size copy where the base
  // has 16 bytes from the run on, instead of a call to memcpy.
  const uint64_t at = first * item_;
  if (bytes <= 16 && n_ - at >= 16) {
    std::memcpy(p, base_ + at, 16);
  } else {
    std::memcpy(p, base_ + at, bytes);
  }
  end_ = static_cast<size_t>(p + bytes - out_->data());
  changed_ += count;
  runs_end_ = first + count;
}

// Elements of kItem bytes (1, 2, 4 or 8) compared 32 bytes at a time, then
// 8: an unchanged block costs four word compares; a changed one is copied
// into the base whole (its unchanged bytes are equal anyway). Returns the
// bytes scanned (whole words; the rest is under a word).
template <uint32_t kItem>
uint64_t DeltaRegionEncoder::ScanBlocks(const uint8_t* now, uint64_t position,
                                        uint64_t bytes) {
  // The top bit of every lane of a word; (x & ~kTop) + ~kTop carries into
  // a lane's top bit when its other bits are not all zero, and never into
  // the next lane.
  constexpr uint64_t kTop = kItem == 1   ? 0x8080808080808080
                            : kItem == 2 ? 0x8000800080008000
                            : kItem == 4 ? 0x8000000080000000
                                         : 0x8000000000000000;
  constexpr uint64_t kBits = 8 * kItem;
  uint8_t* base = base_ + position;
  const uint64_t first_element = position / kItem;
  // The changed lanes of word w (x = its now ^ base).
  auto word = [&](uint64_t w, uint64_t x) {
    uint64_t lanes = (((x & ~kTop) + ~kTop) | x) & kTop;
    const uint64_t first = first_element + w * (8 / kItem);
    while (lanes != 0) {
      Changed(first + static_cast<uint64_t>(__builtin_ctzll(lanes)) / kBits);
      lanes &= lanes - 1;
    }
  };
  const uint64_t blocks = bytes / 32;
  for (uint64_t blk = 0; blk < blocks; ++blk) {
    uint64_t x[4];
    for (int w = 0; w < 4; ++w) {
      uint64_t a, b;
      std::memcpy(&a, now + blk * 32 + w * 8, 8);
      std::memcpy(&b, base + blk * 32 + w * 8, 8);
      x[w] = a ^ b;
    }
    if ((x[0] | x[1] | x[2] | x[3]) == 0) continue;
    std::memcpy(base + blk * 32, now + blk * 32, 32);
    for (uint64_t w = 0; w < 4; ++w) word(blk * 4 + w, x[w]);
  }
  const uint64_t words = bytes / 8;
  for (uint64_t w = blocks * 4; w < words; ++w) {
    uint64_t a, b;
    std::memcpy(&a, now + w * 8, 8);
    std::memcpy(&b, base + w * 8, 8);
    if (a == b) continue;
    std::memcpy(base + w * 8, now + w * 8, 8);
    word(w, a ^ b);
  }
  return words * 8;
}

#if defined(__x86_64__)
namespace {

// Bit i set when element i of the 64-byte blocks at `a` and `b` differs
// (elements of kItem bytes).
template <uint32_t kItem>
__attribute__((target("avx512bw"))) inline uint64_t ChangedLanes512(__m512i a,
                                                                    __m512i b) {
  if constexpr (kItem == 1) return _mm512_cmpneq_epu8_mask(a, b);
  if constexpr (kItem == 2) return _mm512_cmpneq_epu16_mask(a, b);
  if constexpr (kItem == 4) return _mm512_cmpneq_epu32_mask(a, b);
  return _mm512_cmpneq_epu64_mask(a, b);
}

}  // namespace

// ScanBlocks with AVX-512: one compare per 64 bytes yields the changed
// elements' mask directly. Returns the bytes scanned (whole 64-byte blocks).
template <uint32_t kItem>
__attribute__((target("avx512bw"))) uint64_t DeltaRegionEncoder::ScanVector(
    const uint8_t* now, uint64_t position, uint64_t bytes) {
  uint8_t* base = base_ + position;
  const uint64_t first_element = position / kItem;
  constexpr uint64_t kLanes = 64 / kItem;
  constexpr uint64_t kAhead = 1024;
  const uint64_t blocks = bytes / 64;
  // A changed block goes into the base whole (its unchanged lanes are
  // equal anyway), and each changed lane is an element found.
  auto changed = [&](uint64_t blk, uint64_t mask) {
    std::memcpy(base + blk * 64, now + blk * 64, 64);
    for (; mask != 0; mask &= mask - 1) {
      Changed(first_element + blk * kLanes +
              static_cast<uint64_t>(__builtin_ctzll(mask)));
    }
  };
  uint64_t blk = 0;
  for (; blk + 2 <= blocks; blk += 2) {
    // Both streams ahead of the loads (prefetches never fault).
    _mm_prefetch(reinterpret_cast<const char*>(now + blk * 64 + kAhead),
                 _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(base + blk * 64 + kAhead),
                 _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(now + blk * 64 + kAhead + 64),
                 _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(base + blk * 64 + kAhead + 64),
                 _MM_HINT_T0);
    const __m512i a0 = _mm512_loadu_si512(now + blk * 64);
    const __m512i a1 = _mm512_loadu_si512(now + blk * 64 + 64);
    const uint64_t m0 =
        ChangedLanes512<kItem>(a0, _mm512_loadu_si512(base + blk * 64));
    const uint64_t m1 =
        ChangedLanes512<kItem>(a1, _mm512_loadu_si512(base + blk * 64 + 64));
    if ((m0 | m1) == 0) continue;
    if (m0 != 0) changed(blk, m0);
    if (m1 != 0) changed(blk + 1, m1);
  }
  if (blk < blocks) {  // an odd last block
    const __m512i a = _mm512_loadu_si512(now + blk * 64);
    const uint64_t m =
        ChangedLanes512<kItem>(a, _mm512_loadu_si512(base + blk * 64));
    if (m != 0) changed(blk, m);
  }
  return blocks * 64;
}
#endif

template <uint32_t kItem>
uint64_t DeltaRegionEncoder::Scan(const uint8_t* now, uint64_t position,
                                  uint64_t bytes) {
  uint64_t done = 0;
#if defined(__x86_64__)
  if (vector_) done = ScanVector<kItem>(now, position, bytes);
#endif
  return done + ScanBlocks<kItem>(now + done, position + done, bytes - done);
}

void DeltaRegionEncoder::Changed(uint64_t e) {
  if (run_length_ > 0 && run_start_ + run_length_ == e) {
    ++run_length_;
    return;
  }
  if (run_length_ > 0) Run(run_start_, run_length_);
  run_start_ = e;
  run_length_ = 1;
}

void DeltaRegionEncoder::Piece(const uint8_t* now, uint64_t position,
                               uint64_t bytes) {
  const uint64_t chunk = std::max<uint64_t>(kChunkBytes / item_, 1) * item_;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t take = std::min(chunk, bytes - done);
    const uint8_t* p = now + done;
    const uint64_t at = position + done;
    uint64_t scanned = 0;
    switch (item_) {
      case 1:
        scanned = Scan<1>(p, at, take);
        break;
      case 2:
        scanned = Scan<2>(p, at, take);
        break;
      case 4:
        scanned = Scan<4>(p, at, take);
        break;
      case 8:
        scanned = Scan<8>(p, at, take);
        break;
      default:
        break;
    }
    for (uint64_t b = scanned; b < take; b += item_) {
      if (internal::DeltaElementChanged(p + b, base_ + at + b, 0, item_)) {
        internal::DeltaCopyElement(p + b, 0, base_ + at + b, 0, item_);
        Changed((at + b) / item_);
      }
    }
    XXH3_64bits_update(static_cast<XXH3_state_t*>(hash_), base_ + at, take);
    done += take;
  }
}

DeltaMode DeltaRegionEncoder::Finish(uint64_t* changed, uint64_t* base_hash) {
  if (run_length_ > 0) Run(run_start_, run_length_);
  run_length_ = 0;
  out_->resize(end_);
  *changed = changed_;
  *base_hash = XXH3_64bits_digest(static_cast<XXH3_state_t*>(hash_));
  std::vector<uint8_t>* out = out_;
  const uint64_t elements = n_ / item_;
  const uint64_t runs_bytes = out->size() - at_;
  const uint64_t map_bytes = (elements + 7) / 8;
  const uint64_t bitmap_bytes = map_bytes + changed_ * item_;
  const size_t header = at_ - kDeltaRegionHeaderBytes;
  if (runs_bytes <= bitmap_bytes && runs_bytes < n_) {
    StoreLe64(out->data() + header + 8, runs_bytes);
    return DeltaMode::kRuns;
  }
  std::vector<uint8_t> runs(out->begin() + static_cast<ptrdiff_t>(at_),
                            out->end());
  out->resize(header);
  if (bitmap_bytes >= n_) {
    EncodeRawRegion(base_, n_, out);  // the base is the region as it is now
    return DeltaMode::kRaw;
  }
  BeginRegion(DeltaMode::kBitmap, bitmap_bytes, base_hash_, out);
  const size_t map_at = out->size();
  out->resize(map_at + bitmap_bytes, 0);
  uint8_t* map = out->data() + map_at;
  uint8_t* values = map + map_bytes;
  const uint8_t* p = runs.data();
  const uint8_t* stop = p + runs.size();
  uint64_t e = 0;
  while (p < stop) {
    uint64_t gap = 0, k = 0;
    GetVarint(&p, stop, &gap);
    GetVarint(&p, stop, &k);
    e += gap;
    for (uint64_t j = e; j < e + k; ++j) SetDeltaBit(map, j);
    std::memcpy(values, p, k * item_);
    values += k * item_;
    p += k * item_;
    e += k;
  }
  return DeltaMode::kBitmap;
}

DeltaMode EncodeDeltaRegion(const uint8_t* now, uint8_t* base, uint64_t n,
                            uint32_t itemsize, std::vector<uint8_t>* out,
                            uint64_t* changed, uint64_t base_hash) {
  DeltaRegionEncoder encoder(base, n, itemsize, base_hash, out);
  encoder.Piece(now, 0, n);
  uint64_t hash = 0;
  return encoder.Finish(changed, &hash);
}

namespace {

Status Malformed(size_t region, const std::string& what) {
  return Status::DataLoss("malformed delta message: region " +
                          std::to_string(region) + " of the message: " + what);
}

// Copies a run's values: the common short runs as fixed-size copies.
inline void CopyRun(uint8_t* dest, const uint8_t* src, uint64_t n) {
  switch (n) {
    case 2:
      std::memcpy(dest, src, 2);
      return;
    case 4:
      std::memcpy(dest, src, 4);
      return;
    case 8:
      std::memcpy(dest, src, 8);
      return;
    default:
      std::memcpy(dest, src, n);
  }
}

// `apply(offset, bytes, length)` for each changed piece of region i.
template <typename Apply>
Status DecodeRuns(size_t i, const uint8_t* p, const uint8_t* end,
                  uint64_t elements, uint32_t item, const Apply& apply) {
  uint64_t at = 0;
  while (p < end) {
    uint64_t gap = 0, count = 0;
    if (!GetVarint(&p, end, &gap) || !GetVarint(&p, end, &count)) {
      return Malformed(i, "truncated run");
    }
    if (count == 0 || gap > elements - at || count > elements - at - gap) {
      return Malformed(
          i, "run past the region's " + std::to_string(elements) + " elements");
    }
    at += gap;
    if (static_cast<uint64_t>(end - p) / item < count) {
      return Malformed(i, "run values past the payload");
    }
    apply(at * item, p, count * item);
    p += count * item;
    at += count;
  }
  return Status::OK();
}

template <typename Apply>
Status DecodeBitmap(size_t i, const uint8_t* p, uint64_t payload,
                    uint64_t elements, uint32_t item, const Apply& apply) {
  const uint64_t map_bytes = (elements + 7) / 8;
  if (payload < map_bytes) return Malformed(i, "bitmap shorter than region");
  const uint64_t set = DeltaBitsSet(p, 0, map_bytes);
  if (elements % 8 != 0 && (p[map_bytes - 1] >> (elements % 8)) != 0) {
    return Malformed(i, "bits set past the region's elements");
  }
  if (payload - map_bytes != set * item) {
    return Malformed(i, "values do not match the bitmap's " +
                            std::to_string(set) + " changed elements");
  }
  const uint8_t* values = p + map_bytes;
  uint64_t k = 0;
  while (k < elements) {
    if (!DeltaBit(p, k)) {
      ++k;
      continue;
    }
    uint64_t n = 1;
    while (k + n < elements && DeltaBit(p, k + n)) ++n;
    apply(k * item, values, n * item);
    values += n * item;
    k += n;
  }
  return Status::OK();
}

// Region i's payload of `mode` at p, each piece applied through `apply`.
template <typename Apply>
Status DecodeRegion(size_t i, uint8_t mode, const uint8_t* p, uint64_t payload,
                    uint64_t region_bytes, uint32_t item, const Apply& apply) {
  const uint64_t elements = region_bytes / item;
  switch (mode) {
    case static_cast<uint8_t>(DeltaMode::kRaw):
      if (payload != region_bytes) {
        return Malformed(i, "raw payload of " + std::to_string(payload) +
                                " bytes, the region has " +
                                std::to_string(region_bytes));
      }
      if (payload > 0) apply(0, p, payload);  // an empty region has no piece
      return Status::OK();
    case static_cast<uint8_t>(DeltaMode::kRuns):
      return DecodeRuns(i, p, p + payload, elements, item, apply);
    case static_cast<uint8_t>(DeltaMode::kBitmap):
      return DecodeBitmap(i, p, payload, elements, item, apply);
    default:
      return Malformed(i, "unknown mode " + std::to_string(mode));
  }
}

}  // namespace

Status DecodeDeltaMessage(const uint8_t* data, uint64_t size,
                          uint64_t base_generation,
                          const std::vector<uint64_t>& region_bytes,
                          const std::vector<uint32_t>& itemsizes,
                          const DeltaApply& apply,
                          std::vector<DeltaMode>* modes,
                          const std::vector<uint8_t*>* direct,
                          const DeltaBase* base) {
  if (size < kDeltaMessageHeaderBytes || GetU32(data) != kDeltaMagic) {
    return Status::DataLoss("malformed delta message: no RSD1 header");
  }
  if (GetU32(data + 4) != region_bytes.size()) {
    return Status::DataLoss(
        "malformed delta message: " + std::to_string(GetU32(data + 4)) +
        " regions, expected " + std::to_string(region_bytes.size()));
  }
  if (LoadLe64(data + 8) != base_generation) {
    return Status::DataLoss("delta message on base generation " +
                            std::to_string(LoadLe64(data + 8)) +
                            ", this target holds generation " +
                            std::to_string(base_generation));
  }
  modes->clear();
  uint64_t at = kDeltaMessageHeaderBytes;
  for (size_t i = 0; i < region_bytes.size(); ++i) {
    if (size - at < kDeltaRegionHeaderBytes) return Malformed(i, "truncated");
    const uint8_t mode = data[at];
    const uint64_t payload = LoadLe64(data + at + 8);
    const uint64_t base_hash = LoadLe64(data + at + 16);
    at += kDeltaRegionHeaderBytes;
    if (payload > size - at) return Malformed(i, "payload past the message");
    if (base != nullptr && mode != static_cast<uint8_t>(DeltaMode::kRaw) &&
        mode <= static_cast<uint8_t>(DeltaMode::kBitmap) &&
        !(*base)(i, base_hash)) {
      modes->push_back(static_cast<DeltaMode>(mode));
      at += payload;
      continue;
    }
    const uint8_t* p = data + at;
    const uint32_t item = std::max<uint32_t>(itemsizes[i], 1);
    uint8_t* dest = direct != nullptr ? (*direct)[i] : nullptr;
    Status st =
        dest != nullptr
            ? DecodeRegion(i, mode, p, payload, region_bytes[i], item,
                           [dest](uint64_t offset, const uint8_t* bytes,
                                  uint64_t length) {
                             CopyRun(dest + offset, bytes, length);
                           })
            : DecodeRegion(i, mode, p, payload, region_bytes[i], item,
                           [&apply, i](uint64_t offset, const uint8_t* bytes,
                                       uint64_t length) {
                             apply(i, offset, bytes, length);
                           });
    RESHARD_RETURN_NOT_OK(st);
    modes->push_back(static_cast<DeltaMode>(mode));
    at += payload;
  }
  if (at != size) {
    return Status::DataLoss(
        "malformed delta message: " + std::to_string(size - at) +
        " bytes after the last region");
  }
  return Status::OK();
}

}  // namespace reshard::live_internal
