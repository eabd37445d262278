#include "live/delta_codec.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace reshard::live_internal {
namespace {

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
bool GetVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    const uint8_t b = *(*p)++;
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return shift < 63 || (b & 0x7f) <= 1;
  }
  return false;
}

void BeginRegion(DeltaMode mode, uint64_t payload, std::vector<uint8_t>* out) {
  out->push_back(static_cast<uint8_t>(mode));
  out->insert(out->end(), 7, 0);
  PutU64(payload, out);
}

// Tracks the maximal runs of changed elements, reporting each once it
// ends.
template <typename Visit>
struct RunTracker {
  Visit& visit;
  uint64_t start = 0, length = 0;
  void Changed(uint64_t e) {
    if (length > 0 && start + length == e) {
      ++length;
      return;
    }
    if (length > 0) visit(start, length);
    start = e;
    length = 1;
  }
  void Finish() {
    if (length > 0) visit(start, length);
  }
};

// Elements of kItem bytes (1, 2, 4 or 8) compared 32 bytes at a time: an
// unchanged block costs four word compares. Returns the first element not
// compared (a tail of less than a block).
template <uint32_t kItem, typename Tracker>
uint64_t ScanWords(const uint8_t* now, const uint8_t* base, uint64_t elements,
                   Tracker& tracker) {
  constexpr uint64_t kPer = 8 / kItem;  // elements per word
  constexpr uint64_t kLane =
      kItem == 8 ? ~uint64_t{0} : (uint64_t{1} << 8 * kItem) - 1;
  const uint64_t blocks = elements * kItem / 32;
  for (uint64_t blk = 0; blk < blocks; ++blk) {
    uint64_t x[4];
    for (int w = 0; w < 4; ++w) {
      uint64_t a, b;
      std::memcpy(&a, now + blk * 32 + w * 8, 8);
      std::memcpy(&b, base + blk * 32 + w * 8, 8);
      x[w] = a ^ b;
    }
    if ((x[0] | x[1] | x[2] | x[3]) == 0) continue;
    for (int w = 0; w < 4; ++w) {
      if (x[w] == 0) continue;
      const uint64_t first = (blk * 4 + w) * kPer;
      for (uint64_t l = 0; l < kPer; ++l) {
        if ((x[w] >> (8 * kItem * l)) & kLane) tracker.Changed(first + l);
      }
    }
  }
  return blocks * 32 / kItem;
}

// Calls visit(first, count) for every maximal run of elements where `now`
// and `base` differ, in order.
template <typename Visit>
void ForEachRun(const uint8_t* now, const uint8_t* base, uint64_t elements,
                uint32_t item, Visit&& visit) {
  RunTracker<Visit> tracker{visit};
  uint64_t e = 0;
  switch (item) {
    case 1:
      e = ScanWords<1>(now, base, elements, tracker);
      break;
    case 2:
      e = ScanWords<2>(now, base, elements, tracker);
      break;
    case 4:
      e = ScanWords<4>(now, base, elements, tracker);
      break;
    case 8:
      e = ScanWords<8>(now, base, elements, tracker);
      break;
    default:
      break;
  }
  for (; e < elements; ++e) {
    if (std::memcmp(now + e * item, base + e * item, item) != 0) {
      tracker.Changed(e);
    }
  }
  tracker.Finish();
}

}  // namespace

void StoreLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> 8 * i);
}

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

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
  BeginRegion(DeltaMode::kRaw, n, out);
  out->insert(out->end(), now, now + n);
}

DeltaMode EncodeDeltaRegion(const uint8_t* now, uint8_t* base, uint64_t n,
                            uint32_t itemsize, std::vector<uint8_t>* out,
                            uint64_t* changed) {
  const uint32_t item = std::max<uint32_t>(itemsize, 1);
  const uint64_t elements = n / item;
  // One scan writes the runs form and brings the base up to date while the
  // bytes are in cache; a denser change is then rewritten from the runs
  // (bitmap) or from `now` (raw), never scanned again.
  BeginRegion(DeltaMode::kRuns, 0, out);
  const size_t at = out->size();
  uint64_t count = 0, end = 0;
  ForEachRun(now, base, elements, item, [&](uint64_t first, uint64_t k) {
    const uint64_t bytes = k * item;
    const size_t size = out->size();
    out->resize(size + 20 + bytes);
    uint8_t* p = PutVarintAt(first - end, out->data() + size);
    p = PutVarintAt(k, p);
    std::memcpy(p, now + first * item, bytes);
    out->resize(static_cast<size_t>(p + bytes - out->data()));
    // The scan is past this run: the base may take it now.
    std::memcpy(base + first * item, now + first * item, bytes);
    count += k;
    end = first + k;
  });
  *changed = count;
  const uint64_t runs_bytes = out->size() - at;
  const uint64_t map_bytes = (elements + 7) / 8;
  const uint64_t bitmap_bytes = map_bytes + count * item;
  const size_t header = at - kDeltaRegionHeaderBytes;
  if (runs_bytes <= bitmap_bytes && runs_bytes < n) {
    StoreLe64(out->data() + header + 8, runs_bytes);
    return DeltaMode::kRuns;
  }
  std::vector<uint8_t> runs(out->begin() + at, out->end());
  out->resize(header);
  if (bitmap_bytes >= n) {
    EncodeRawRegion(now, n, out);
    return DeltaMode::kRaw;
  }
  BeginRegion(DeltaMode::kBitmap, bitmap_bytes, out);
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
    for (uint64_t j = e; j < e + k; ++j) {
      map[j / 8] |= static_cast<uint8_t>(1u << (j % 8));
    }
    std::memcpy(values, p, k * item);
    values += k * item;
    p += k * item;
    e += k;
  }
  return DeltaMode::kBitmap;
}

namespace {

Status Malformed(size_t region, const std::string& what) {
  return Status::DataLoss("malformed delta message: region " +
                          std::to_string(region) + " of the message: " + what);
}

Status DecodeRuns(size_t i, const uint8_t* p, const uint8_t* end,
                  uint64_t elements, uint32_t item, const DeltaApply& apply) {
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
    apply(i, at * item, p, count * item);
    p += count * item;
    at += count;
  }
  return Status::OK();
}

Status DecodeBitmap(size_t i, const uint8_t* p, uint64_t payload,
                    uint64_t elements, uint32_t item, const DeltaApply& apply) {
  const uint64_t map_bytes = (elements + 7) / 8;
  if (payload < map_bytes) return Malformed(i, "bitmap shorter than region");
  uint64_t set = 0;
  for (uint64_t b = 0; b < map_bytes; ++b) {
    set += static_cast<uint64_t>(__builtin_popcount(p[b]));
  }
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
    if ((p[k / 8] >> (k % 8) & 1) == 0) {
      ++k;
      continue;
    }
    uint64_t n = 1;
    while (k + n < elements && (p[(k + n) / 8] >> ((k + n) % 8) & 1)) ++n;
    apply(i, k * item, values, n * item);
    values += n * item;
    k += n;
  }
  return Status::OK();
}

}  // namespace

Status DecodeDeltaMessage(const uint8_t* data, uint64_t size,
                          uint64_t base_generation,
                          const std::vector<uint64_t>& region_bytes,
                          const std::vector<uint32_t>& itemsizes,
                          const DeltaApply& apply,
                          std::vector<DeltaMode>* modes) {
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
    at += kDeltaRegionHeaderBytes;
    if (payload > size - at) return Malformed(i, "payload past the message");
    const uint8_t* p = data + at;
    const uint32_t item = std::max<uint32_t>(itemsizes[i], 1);
    const uint64_t elements = region_bytes[i] / item;
    Status st;
    switch (mode) {
      case static_cast<uint8_t>(DeltaMode::kRaw):
        if (payload != region_bytes[i]) {
          st = Malformed(i, "raw payload of " + std::to_string(payload) +
                                " bytes, the region has " +
                                std::to_string(region_bytes[i]));
        } else {
          apply(i, 0, p, payload);
        }
        break;
      case static_cast<uint8_t>(DeltaMode::kRuns):
        st = DecodeRuns(i, p, p + payload, elements, item, apply);
        break;
      case static_cast<uint8_t>(DeltaMode::kBitmap):
        st = DecodeBitmap(i, p, payload, elements, item, apply);
        break;
      default:
        st = Malformed(i, "unknown mode " + std::to_string(mode));
    }
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
