// Sorting by long string keys that share prefixes (ids like "sha256:...").

#ifndef RESHARD_UTIL_STRING_SORT_H_
#define RESHARD_UTIL_STRING_SORT_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace reshard::internal {

// Stable LSD radix sort of `v` by its first member, one byte per pass;
// passes over a byte that is equal in every key are skipped. Linear in the
// size, where a comparison sort of a million keys spends most of its time
// in mispredicted branches.
inline void RadixSortByFirst(std::vector<std::pair<uint64_t, size_t>>* v) {
  const size_t n = v->size();
  if (n < 2) return;
  std::vector<std::array<size_t, 256>> counts(8);
  for (auto& c : counts) c.fill(0);
  for (const auto& [k, i] : *v) {
    for (size_t b = 0; b < 8; ++b) ++counts[b][(k >> (8 * b)) & 0xFF];
  }
  std::vector<std::pair<uint64_t, size_t>> buffer(n);
  for (size_t b = 0; b < 8; ++b) {
    std::array<size_t, 256>& c = counts[b];
    if (*std::max_element(c.begin(), c.end()) == n) continue;
    size_t sum = 0;
    for (size_t& x : c) {
      const size_t count = x;
      x = sum;
      sum += count;
    }
    for (const auto& e : *v) buffer[c[(e.first >> (8 * b)) & 0xFF]++] = e;
    v->swap(buffer);
  }
}

// Sorts `items` by the string `key(item)` (byte order). Each item gets an
// 8-byte big-endian key taken after the prefix common to all strings, so
// most comparisons are one integer compare; full string comparisons only
// break ties.
template <typename T, typename KeyFn>
void SortByStringKey(std::vector<T>* items, KeyFn key) {
  if (items->size() < 2) return;
  const std::string_view first = key((*items)[0]);
  size_t common = first.size();
  for (const T& item : *items) {
    const std::string_view s = key(item);
    const size_t n = std::min(common, s.size());
    size_t i = 0;
    while (i < n && s[i] == first[i]) ++i;
    common = i;
    if (common == 0) break;
  }
  std::vector<std::pair<uint64_t, size_t>> keyed;
  keyed.reserve(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string_view s = key((*items)[i]);
    uint64_t k = 0;
    for (size_t b = 0; b < 8; ++b) {
      const size_t at = common + b;
      k = (k << 8) | (at < s.size() ? static_cast<unsigned char>(s[at]) : 0u);
    }
    keyed.emplace_back(k, i);
  }
  RadixSortByFirst(&keyed);
  // Equal integer keys (rare) are ordered by the full strings.
  for (size_t i = 0; i < keyed.size();) {
    size_t j = i + 1;
    while (j < keyed.size() && keyed[j].first == keyed[i].first) ++j;
    if (j - i > 1) {
      std::sort(keyed.begin() + i, keyed.begin() + j,
                [&](const auto& a, const auto& b) {
                  return key((*items)[a.second]) < key((*items)[b.second]);
                });
    }
    i = j;
  }
  std::vector<T> sorted;
  sorted.reserve(items->size());
  for (const auto& [k, i] : keyed) sorted.push_back(std::move((*items)[i]));
  *items = std::move(sorted);
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_STRING_SORT_H_
