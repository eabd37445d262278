#include "util/box_cover.h"

#include <algorithm>
#include <numeric>

namespace reshard::internal {
namespace {

using u128 = unsigned __int128;

bool Intersects(size_t ndim, const BoxRef& a, const BoxRef& b) {
  for (size_t d = 0; d < ndim; ++d) {
    if (a.offset[d] >= b.offset[d] + b.shape[d] ||
        b.offset[d] >= a.offset[d] + a.shape[d]) {
      return false;
    }
  }
  return true;
}

// Grid fast path: per dimension the distinct intervals partition the extent
// and there are exactly as many distinct boxes as grid cells. Returns
// nullopt when the boxes do not form a grid (the caller falls back).
std::optional<bool> GridCovers(std::span<const int64_t> extent,
                               std::span<const BoxRef> boxes) {
  const size_t ndim = extent.size();
  u128 cells = 1;
  std::vector<std::pair<int64_t, int64_t>> iv(boxes.size());
  for (size_t d = 0; d < ndim; ++d) {
    for (size_t i = 0; i < boxes.size(); ++i) {
      iv[i] = {boxes[i].offset[d], boxes[i].offset[d] + boxes[i].shape[d]};
    }
    std::sort(iv.begin(), iv.end());
    iv.erase(std::unique(iv.begin(), iv.end()), iv.end());
    int64_t pos = 0;
    for (const auto& [b, e] : iv) {
      if (b != pos) return std::nullopt;
      pos = e;
    }
    if (pos != extent[d]) return std::nullopt;
    cells *= iv.size();
    iv.resize(boxes.size());
  }
  if (cells != boxes.size()) return std::nullopt;
  // Every box is a cell; they cover all cells iff they are distinct.
  std::vector<size_t> order(boxes.size());
  std::iota(order.begin(), order.end(), 0);
  auto less = [&](size_t a, size_t b) {
    return std::lexicographical_compare(boxes[a].offset, boxes[a].offset + ndim,
                                        boxes[b].offset,
                                        boxes[b].offset + ndim);
  };
  std::sort(order.begin(), order.end(), less);
  for (size_t i = 1; i < order.size(); ++i) {
    if (!less(order[i - 1], order[i])) return false;
  }
  return true;
}

// Signed corner sums: the sum of the boxes' indicator functions equals the
// indicator of the extent iff their mixed finite differences agree, i.e.
// iff the signed corner multiset reduces to the extent's 2^ndim corners.
bool CornersCover(std::span<const int64_t> extent,
                  std::span<const BoxRef> boxes) {
  const size_t ndim = extent.size();
  const size_t ncorners = size_t{1} << ndim;
  const size_t stride = ndim + 1;  // coordinates then sign
  std::vector<int64_t> corners(boxes.size() * ncorners * stride);
  size_t k = 0;
  for (const BoxRef& b : boxes) {
    for (size_t mask = 0; mask < ncorners; ++mask) {
      int64_t* c = &corners[k * stride];
      int sign = 1;
      for (size_t d = 0; d < ndim; ++d) {
        const bool upper = (mask >> d) & 1;
        c[d] = upper ? b.offset[d] + b.shape[d] : b.offset[d];
        if (upper) sign = -sign;
      }
      c[ndim] = sign;
      ++k;
    }
  }
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::lexicographical_compare(
        &corners[a * stride], &corners[a * stride] + ndim, &corners[b * stride],
        &corners[b * stride] + ndim);
  });
  size_t nonzero = 0;
  for (size_t i = 0; i < k;) {
    const int64_t* c = &corners[order[i] * stride];
    int64_t sum = 0;
    size_t j = i;
    while (j < k && std::equal(c, c + ndim, &corners[order[j] * stride])) {
      sum += corners[order[j] * stride + ndim];
      ++j;
    }
    if (sum != 0) {
      // Must be a corner of the extent with the matching sign.
      int expected = 1;
      for (size_t d = 0; d < ndim; ++d) {
        if (c[d] == extent[d]) {
          expected = -expected;
        } else if (c[d] != 0) {
          return false;
        }
      }
      if (sum != expected) return false;
      ++nonzero;
    }
    i = j;
  }
  return nonzero == ncorners;
}

}  // namespace

bool ExactlyCovers(std::span<const int64_t> extent,
                   std::span<const BoxRef> boxes) {
  const size_t ndim = extent.size();
  if (boxes.empty()) return false;
  // Volumes in checked 128-bit arithmetic: a wrapped product could fake an
  // equal volume. Nothing real has 2^128 elements, so overflow means "no".
  u128 total = 1;
  for (int64_t e : extent) {
    if (e < 1 || __builtin_mul_overflow(total, static_cast<u128>(e), &total)) {
      return false;
    }
  }
  if (boxes.size() == 1) {
    for (size_t d = 0; d < ndim; ++d) {
      if (boxes[0].offset[d] != 0 || boxes[0].shape[d] != extent[d]) {
        return false;
      }
    }
    return true;
  }
  u128 sum = 0;
  for (const BoxRef& b : boxes) {
    u128 v = 1;
    for (size_t d = 0; d < ndim; ++d) {
      if (b.offset[d] < 0 || b.shape[d] < 1 ||
          b.offset[d] > extent[d] - b.shape[d]) {
        return false;
      }
      if (__builtin_mul_overflow(v, static_cast<u128>(b.shape[d]), &v)) {
        return false;
      }
    }
    if (__builtin_add_overflow(sum, v, &sum) || sum > total) return false;
  }
  if (sum != total) return false;
  if (auto grid = GridCovers(extent, boxes); grid.has_value()) return *grid;
  if (ndim <= 8) return CornersCover(extent, boxes);
  // Disjoint boxes inside the extent with the full volume tile it.
  return !FindOverlap(ndim, boxes).has_value();
}

std::optional<std::pair<size_t, size_t>> FindOverlap(
    size_t ndim, std::span<const BoxRef> boxes) {
  if (boxes.size() < 2) return std::nullopt;
  // Sweep along the dimension with the most distinct begin coordinates.
  size_t best_dim = 0;
  size_t best_distinct = 0;
  std::vector<int64_t> begins(boxes.size());
  for (size_t d = 0; d < ndim; ++d) {
    for (size_t i = 0; i < boxes.size(); ++i) begins[i] = boxes[i].offset[d];
    std::sort(begins.begin(), begins.end());
    const size_t distinct =
        std::unique(begins.begin(), begins.end()) - begins.begin();
    if (distinct > best_distinct) {
      best_distinct = distinct;
      best_dim = d;
    }
  }
  std::vector<size_t> order(boxes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return boxes[a].offset[best_dim] < boxes[b].offset[best_dim];
  });
  std::vector<size_t> active;
  for (size_t idx : order) {
    const int64_t begin = boxes[idx].offset[best_dim];
    std::erase_if(active, [&](size_t a) {
      return boxes[a].offset[best_dim] + boxes[a].shape[best_dim] <= begin;
    });
    for (size_t a : active) {
      if (Intersects(ndim, boxes[a], boxes[idx])) {
        return std::make_pair(std::min(a, idx), std::max(a, idx));
      }
    }
    active.push_back(idx);
  }
  return std::nullopt;
}

}  // namespace reshard::internal
