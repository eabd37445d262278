#include "exec_cuda/copy_lowering.h"

#include <string>

namespace reshard::cuda {

namespace {

uint8_t* Address(uint64_t address) {
  return reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(address));
}

// A pitched copy of the innermost `k` (0, 1 or 2) loops of `f` from the
// given byte offsets, or nullopt where no descriptor within `limits`
// expresses them: pitches at least the row and at most the maximum, and
// for two loops an outer stride that is a whole number of pitches, at
// least the inner loop's count (the slice height, ysize).
std::optional<Copy3D> InnerCopy(const BoundRegion& region, const FoldedLoops& f,
                                size_t k, const LoweringLimits& limits,
                                uint64_t src_offset, uint64_t dst_offset) {
  Copy3D c;
  c.src.ptr = Address(region.source_address + src_offset);
  c.dst.ptr = Address(region.target_address + dst_offset);
  c.extent = {f.inner_bytes, 1, 1};
  c.src.pitch = c.dst.pitch = f.inner_bytes;
  c.src.xsize = c.dst.xsize = f.inner_bytes;
  c.src.ysize = c.dst.ysize = 1;
  if (k == 0) return c;
  const OuterLoop& rows = f.loops[f.loops.size() - 1];
  auto pitch_ok = [&](uint64_t p) {
    return p >= f.inner_bytes && p <= limits.max_pitch;
  };
  if (!pitch_ok(rows.source_stride) || !pitch_ok(rows.target_stride)) {
    return std::nullopt;
  }
  c.src.pitch = rows.source_stride;
  c.dst.pitch = rows.target_stride;
  c.extent.height = rows.count;
  c.src.ysize = c.dst.ysize = rows.count;
  if (k == 1) return c;
  const OuterLoop& slices = f.loops[f.loops.size() - 2];
  auto slice_height = [&](uint64_t stride, uint64_t pitch) -> uint64_t {
    if (stride % pitch != 0 || stride / pitch < rows.count) return 0;
    return stride / pitch;
  };
  const uint64_t src_y = slice_height(slices.source_stride, c.src.pitch);
  const uint64_t dst_y = slice_height(slices.target_stride, c.dst.pitch);
  if (src_y == 0 || dst_y == 0) return std::nullopt;
  c.src.ysize = src_y;
  c.dst.ysize = dst_y;
  c.extent.depth = slices.count;
  return c;
}

// Calls fn(source offset, target offset) for every iteration of the
// outermost `outer` loops of `f`.
template <typename Fn>
void ForEachOuter(const FoldedLoops& f, size_t outer, Fn&& fn) {
  std::vector<uint64_t> index(outer, 0);
  while (true) {
    uint64_t s = 0, d = 0;
    for (size_t i = 0; i < outer; ++i) {
      s += index[i] * f.loops[i].source_stride;
      d += index[i] * f.loops[i].target_stride;
    }
    fn(s, d);
    size_t i = outer;
    while (i > 0 && ++index[i - 1] == f.loops[i - 1].count) index[--i] = 0;
    if (i == 0) return;
  }
}

// The copies that move `region` with each copy taking the innermost `k`
// loops, or nullopt where they cannot or would be more than `cap`.
std::optional<std::vector<Copy3D>> CopiesTaking(const BoundRegion& region,
                                                const FoldedLoops& f, size_t k,
                                                const LoweringLimits& limits,
                                                uint64_t cap) {
  if (k > f.loops.size()) return std::nullopt;
  const size_t outer = f.loops.size() - k;
  uint64_t count = 1;
  for (size_t i = 0; i < outer; ++i) {
    count *= f.loops[i].count;
    if (count > cap) return std::nullopt;
  }
  if (count > cap) return std::nullopt;
  if (!InnerCopy(region, f, k, limits, 0, 0)) return std::nullopt;
  std::vector<Copy3D> copies;
  copies.reserve(count);
  ForEachOuter(f, outer, [&](uint64_t s, uint64_t d) {
    copies.push_back(*InnerCopy(region, f, k, limits, s, d));
  });
  return copies;
}

}  // namespace

FoldedLoops FoldLoops(const BoundRegion& region) {
  FoldedLoops f;
  f.inner_bytes = region.inner_bytes;
  for (const OuterLoop& l : region.loops) {
    if (l.count != 1) f.loops.push_back(l);
  }
  bool changed = true;
  while (changed) {
    changed = false;
    if (!f.loops.empty() && f.loops.back().source_stride == f.inner_bytes &&
        f.loops.back().target_stride == f.inner_bytes) {
      f.inner_bytes *= f.loops.back().count;
      f.loops.pop_back();
      changed = true;
      continue;
    }
    for (size_t d = 0; d + 1 < f.loops.size(); ++d) {
      const OuterLoop& in = f.loops[d + 1];
      OuterLoop& out = f.loops[d];
      if (out.source_stride == in.source_stride * in.count &&
          out.target_stride == in.target_stride * in.count) {
        out = {out.count * in.count, in.source_stride, in.target_stride};
        f.loops.erase(f.loops.begin() + d + 1);
        changed = true;
        break;
      }
    }
  }
  return f;
}

Result<RegionWork> LowerRegion(const BoundRegion& region,
                               const LoweringLimits& limits) {
  const FoldedLoops f = FoldLoops(region);
  RegionWork work;
  if (region.bytes == 0) return work;
  for (size_t k = std::min<size_t>(2, f.loops.size()) + 1; k-- > 0;) {
    if (auto copies = CopiesTaking(region, f, k, limits, limits.max_copies)) {
      work.copies = std::move(*copies);
      return work;
    }
  }
  if (!limits.kernel_allowed) {
    // One copy per row (always expressible), however many.
    work.copies = *CopiesTaking(region, f, 0, limits, ~uint64_t{0});
    return work;
  }
  if (f.loops.size() > kMaxLoops) {
    return Status::InvalidArgument(
        "region " + std::to_string(region.region) + " has " +
        std::to_string(f.loops.size()) +
        " outer loops after folding; the gather/scatter kernel takes at most " +
        std::to_string(kMaxLoops));
  }
  GatherScatterArgs a;
  a.src = Address(region.source_address);
  a.dst = Address(region.target_address);
  a.inner_bytes = f.inner_bytes;
  a.loops = static_cast<uint32_t>(f.loops.size());
  a.rows = 1;
  for (size_t i = 0; i < f.loops.size(); ++i) {
    a.counts[i] = f.loops[i].count;
    a.src_strides[i] = f.loops[i].source_stride;
    a.dst_strides[i] = f.loops[i].target_stride;
    a.rows *= f.loops[i].count;
  }
  work.kernel = a;
  return work;
}

}  // namespace reshard::cuda
