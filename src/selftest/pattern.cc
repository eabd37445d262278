#include "selftest/pattern.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "selftest/selftest.h"

namespace reshard {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  x ^= x >> 33;
  return x;
}

// Calls f(local byte offset, global element index, element count) for every
// run of contiguous elements along the last dimension of a fragment.
template <typename F>
void ForEachRow(const Dims& global_shape, const Dims& offset, const Dims& shape,
                int64_t itemsize, F&& f) {
  const size_t n = shape.size();
  Dims idx(n, 0);
  const uint64_t row = static_cast<uint64_t>(shape[n - 1]);
  uint64_t local = 0;
  while (true) {
    uint64_t g = 0;
    for (size_t d = 0; d < n; ++d) {
      g = g * static_cast<uint64_t>(global_shape[d]) +
          static_cast<uint64_t>(offset[d] + idx[d]);
    }
    f(local, g, row);
    local += row * static_cast<uint64_t>(itemsize);
    size_t d = n - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (n == 1) return;
  }
}

}  // namespace

uint64_t SelfTestElementGeneration(uint64_t tensor, uint64_t element,
                                   uint64_t generation, double fraction) {
  if (fraction >= 1.0 || generation <= 1) return generation;
  if (fraction <= 0) return 1;
  const auto threshold = static_cast<uint64_t>(fraction * 0x1p64);
  for (uint64_t k = generation; k >= 2; --k) {
    const uint64_t h = Mix(element * 0xD6E8FEB86659FD93ull ^ (tensor << 40) ^
                           k * 0x9E3779B97F4A7C15ull);
    if (h < threshold) return k;
  }
  return 1;
}

namespace {

// The hash every byte of one element's pattern derives from.
inline uint64_t ElementHash(uint64_t tensor, uint64_t element) {
  return Mix(element * 0x9E3779B97F4A7C15ull + tensor + 1);
}

// Byte `byte` of an element whose hash is `h`.
inline uint8_t PatternByteOf(uint64_t h, uint64_t byte) {
  return static_cast<uint8_t>((h >> (8 * (byte % 8))) ^ (byte / 8));
}

// Writes the `item` pattern bytes of an element whose hash is `h`: one
// hash per element, not per byte (the fill and the check of a self-test
// run through every byte of the model, once per update). Bytes 0-7 are
// h's bytes from the lowest, so on a little-endian machine they are its
// memory image.
inline void WritePatternElement(uint64_t h, uint64_t item, uint8_t* out) {
  if constexpr (std::endian::native == std::endian::little) {
    if (item <= 8) {
      std::memcpy(out, &h, item);
      return;
    }
  }
  for (uint64_t b = 0; b < item; ++b) out[b] = PatternByteOf(h, b);
}

// Elements [g, g + n) of tensor `ti` at `generation`, `kItem` bytes each
// (0: `item`), written to `out`. A generation that changes every element
// salts them all alike, so the salt is computed once.
template <uint64_t kItem>
void WritePatternElements(uint64_t ti, uint64_t g, uint64_t n, uint64_t item,
                          uint64_t generation, double change_fraction,
                          uint8_t* out) {
  const uint64_t width = kItem != 0 ? kItem : item;
  if (change_fraction >= 1.0 || generation <= 1) {
    const uint64_t tensor = ti + (generation << 32);
    for (uint64_t e = 0; e < n; ++e, out += width) {
      WritePatternElement(ElementHash(tensor, g + e), width, out);
    }
    return;
  }
  for (uint64_t e = 0; e < n; ++e, out += width) {
    const uint64_t salt =
        SelfTestElementGeneration(ti, g + e, generation, change_fraction) << 32;
    WritePatternElement(ElementHash(ti + salt, g + e), width, out);
  }
}

// WritePatternElements with the common widths fixed at compile time.
void WritePatternRun(uint64_t ti, uint64_t g, uint64_t n, uint64_t item,
                     uint64_t generation, double change_fraction,
                     uint8_t* out) {
  using Write = void (*)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                         double, uint8_t*);
  // By width; 0 (any width) where no width is fixed.
  constexpr Write kByWidth[] = {
      WritePatternElements<0>, WritePatternElements<1>,
      WritePatternElements<2>, WritePatternElements<0>,
      WritePatternElements<4>, WritePatternElements<0>,
      WritePatternElements<0>, WritePatternElements<0>,
      WritePatternElements<8>};
  const Write write =
      item < std::size(kByWidth) ? kByWidth[item] : WritePatternElements<0>;
  write(ti, g, n, item, generation, change_fraction, out);
}

}  // namespace

uint8_t SelfTestPatternByte(uint64_t tensor, uint64_t element, uint64_t byte) {
  return PatternByteOf(ElementHash(tensor, element), byte);
}

void SelfTestPatternElement(uint64_t tensor, uint64_t element, uint64_t item,
                            uint8_t* out) {
  WritePatternElement(ElementHash(tensor, element), item, out);
}

namespace internal {
namespace {

// Bytes of the fragments of `m` that have a buffer.
uint64_t BufferedBytes(const WeightPlacementManifest& m,
                       const HostBuffers& buffers) {
  uint64_t total = 0;
  for (const auto* f : m.fragments()) {
    if (buffers.data.count(f->placement_fragment_id())) total += f->nbytes();
  }
  return total;
}

}  // namespace

std::unordered_map<std::string_view, uint64_t> TensorIndex(
    const WeightPlacementManifest& m) {
  std::unordered_map<std::string_view, uint64_t> out;
  for (size_t i = 0; i < m.tensors().size(); ++i) {
    out.emplace(m.tensors()[i].tensor_id(), i);
  }
  return out;
}

namespace {

// Calls `row(fragment, tensor_index, itemsize, base + local, global_first,
// elements)` for every row of every fragment of `m` that has a buffer, in
// fragment id order, reporting progress per fragment; stops early once
// `row` returns false.
template <typename Row>
void ForEachBufferedRow(
    const WeightPlacementManifest& m,
    const std::unordered_map<std::string_view, uint64_t>& tensors,
    const HostBuffers& buffers, const PatternProgress& progress, Row&& row) {
  const uint64_t total = BufferedBytes(m, buffers);
  uint64_t done = 0;
  bool go_on = true;
  for (const auto* f : m.fragments()) {
    if (!go_on) break;
    auto it = buffers.data.find(f->placement_fragment_id());
    if (it == buffers.data.end()) continue;
    if (progress) progress(done, total);
    done += f->nbytes();
    const TensorDescriptor* t = m.FindTensor(f->tensor_id());
    const uint64_t ti = tensors.at(f->tensor_id());
    uint8_t* base = it->second;
    const auto item = static_cast<uint64_t>(t->itemsize());
    ForEachRow(t->global_shape(), f->global_offset(), f->local_shape(),
               t->itemsize(), [&](uint64_t local, uint64_t g, uint64_t n) {
                 if (go_on) go_on = row(*f, ti, item, base + local, g, n);
               });
  }
  if (progress) progress(total, total);
}

// Checks elements [first, end) of a row whose first element, global index
// `g`, is at `row`, byte by byte; false with *mismatch set at the first
// byte that differs.
bool CheckElements(const PlacementFragment& f, uint64_t ti, uint64_t item,
                   const uint8_t* row, uint64_t g, uint64_t first, uint64_t end,
                   uint64_t generation, double change_fraction,
                   std::string* mismatch) {
  const uint8_t* p = row + first * item;
  std::vector<uint8_t> want(item);
  for (uint64_t e = first; e < end; ++e) {
    WritePatternRun(ti, g + e, 1, item, generation, change_fraction,
                    want.data());
    for (uint64_t b = 0; b < item; ++b, ++p) {
      if (*p != want[b]) {
        *mismatch = "tensor " + f.tensor_id() + ", fragment " +
                    f.placement_fragment_id() + ", global element " +
                    std::to_string(g + e) + ", byte " + std::to_string(b) +
                    ": expected " + std::to_string(want[b]) + ", got " +
                    std::to_string(*p);
        return false;
      }
    }
  }
  return true;
}

}  // namespace

void FillPattern(const WeightPlacementManifest& m,
                 const std::unordered_map<std::string_view, uint64_t>& tensors,
                 const HostBuffers& buffers, const PatternProgress& progress,
                 uint64_t generation, double change_fraction) {
  ForEachBufferedRow(m, tensors, buffers, progress,
                     [&](const PlacementFragment&, uint64_t ti, uint64_t item,
                         uint8_t* p, uint64_t g, uint64_t n) {
                       WritePatternRun(ti, g, n, item, generation,
                                       change_fraction, p);
                       return true;
                     });
}

std::string VerifyPattern(
    const WeightPlacementManifest& m,
    const std::unordered_map<std::string_view, uint64_t>& tensors,
    const HostBuffers& buffers, const PatternProgress& progress,
    uint64_t generation, double change_fraction) {
  std::string mismatch;
  ForEachBufferedRow(
      m, tensors, buffers, progress,
      [&](const PlacementFragment& f, uint64_t ti, uint64_t item,
          const uint8_t* p, uint64_t g, uint64_t n) {
        // The expected bytes of up to kChunk elements at a time, compared
        // with memcmp; a differing chunk is then searched byte by byte.
        constexpr uint64_t kChunk = 256;
        uint8_t want[kChunk * 16];
        for (uint64_t e0 = 0; e0 < n; e0 += kChunk) {
          const uint64_t m = std::min(kChunk, n - e0);
          if (item <= 16) {
            WritePatternRun(ti, g + e0, m, item, generation, change_fraction,
                            want);
            if (std::memcmp(want, p + e0 * item, m * item) == 0) continue;
          }
          if (!CheckElements(f, ti, item, p, g, e0, e0 + m, generation,
                             change_fraction, &mismatch)) {
            return false;
          }
        }
        return true;
      });
  return mismatch;
}

}  // namespace internal
}  // namespace reshard
