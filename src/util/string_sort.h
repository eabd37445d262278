// Sorting by long string keys that share prefixes (ids like "sha256:...").

#ifndef RESHARD_UTIL_STRING_SORT_H_
#define RESHARD_UTIL_STRING_SORT_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace reshard::internal {

// Sorts `items` by the string `key(item)` (byte order). Each item gets an
// 8-byte big-endian key taken after the prefix common to all strings, so
// most comparisons are one integer compare; full string comparisons only
// break ties.
template <typename T, typename KeyFn>
void SortByStringKey(std::vector<T>* items, KeyFn key) {
  if (items->size() < 2) return;
  const std::string& first = key((*items)[0]);
  size_t common = first.size();
  for (const T& item : *items) {
    const std::string& s = key(item);
    const size_t n = std::min(common, s.size());
    size_t i = 0;
    while (i < n && s[i] == first[i]) ++i;
    common = i;
    if (common == 0) break;
  }
  std::vector<std::pair<uint64_t, size_t>> keyed;
  keyed.reserve(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string& s = key((*items)[i]);
    uint64_t k = 0;
    for (size_t b = 0; b < 8; ++b) {
      const size_t at = common + b;
      k = (k << 8) | (at < s.size() ? static_cast<unsigned char>(s[at]) : 0u);
    }
    keyed.emplace_back(k, i);
  }
  std::sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return key((*items)[a.second]) < key((*items)[b.second]);
  });
  std::vector<T> sorted;
  sorted.reserve(items->size());
  for (const auto& [k, i] : keyed) sorted.push_back(std::move((*items)[i]));
  *items = std::move(sorted);
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_STRING_SORT_H_
