// Sorting by long string keys that share prefixes (ids like "sha256:...").

#ifndef RESHARD_UTIL_STRING_SORT_H_
#define RESHARD_UTIL_STRING_SORT_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::internal {

// Stable LSD radix sort of `v` by the 64-bit `key(element)`, one byte per
// pass; passes over a byte that is equal in every key are skipped. Linear
// in the size, where a comparison sort of a million keys spends most of
// its time in mispredicted branches.
template <typename T, typename KeyFn>
void RadixSortByKey(std::vector<T>* v, KeyFn key) {
  const size_t n = v->size();
  if (n < 2) return;
  std::vector<std::array<size_t, 256>> counts(8);
  for (auto& c : counts) c.fill(0);
  for (const T& e : *v) {
    const uint64_t k = key(e);
    for (size_t b = 0; b < 8; ++b) ++counts[b][(k >> (8 * b)) & 0xFF];
  }
  std::vector<T> buffer(n);
  for (size_t b = 0; b < 8; ++b) {
    std::array<size_t, 256>& c = counts[b];
    if (*std::max_element(c.begin(), c.end()) == n) continue;
    size_t sum = 0;
    for (size_t& x : c) {
      const size_t count = x;
      x = sum;
      sum += count;
    }
    for (const T& e : *v) buffer[c[(key(e) >> (8 * b)) & 0xFF]++] = e;
    v->swap(buffer);
  }
}

// The same by the first member of each pair.
inline void RadixSortByFirst(std::vector<std::pair<uint64_t, size_t>>* v) {
  RadixSortByKey(v,
                 [](const std::pair<uint64_t, size_t>& e) { return e.first; });
}

// The length of the prefix `a` and `b` share.
inline size_t CommonPrefix(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// The 8 bytes of `s` from `at`, big-endian, zero-padded past its end.
inline uint64_t KeyAt(std::string_view s, size_t at) {
  uint64_t k = 0;
  for (size_t b = 0; b < 8; ++b) {
    k = (k << 8) |
        (at + b < s.size() ? static_cast<unsigned char>(s[at + b]) : 0u);
  }
  return k;
}

// Sorts `items` by the string `key(item)` (byte order). Each item gets an
// 8-byte big-endian key taken after the prefix common to all strings, so
// most comparisons are one integer compare; full string comparisons only
// break ties. Returns true if two items have equal strings (they are then
// adjacent): only items with equal integer keys can, so uniqueness costs
// no string comparison where the keys differ.
//
// Strings are often scattered in memory (one heap block each), so they are
// read once where possible: the common prefix is guessed from the first,
// middle and last items, every key is taken after it while each string is
// checked to share it, and only if one does not are the keys taken again
// after the true common prefix.
//
// `from`, if given, receives the permutation: (*from)[k] is the position
// before the sort of the item now at k.
template <typename T, typename KeyFn>
bool SortByStringKey(std::vector<T>* items, KeyFn key,
                     std::vector<uint32_t>* from = nullptr) {
  const size_t n = items->size();
  if (from != nullptr) from->assign(n, 0);
  if (n < 2) return false;
  const std::string_view first = key((*items)[0]);
  const size_t guess = std::min(CommonPrefix(first, key((*items)[n / 2])),
                                CommonPrefix(first, key((*items)[n - 1])));
  std::vector<std::pair<uint64_t, size_t>> keyed(n);
  size_t common = guess;
  for (size_t i = 0; i < n; ++i) {
    const std::string_view s = key((*items)[i]);
    if (s.size() < guess || s.compare(0, guess, first, 0, guess) != 0) {
      common = std::min(common, CommonPrefix(first, s));
    }
    keyed[i] = {KeyAt(s, guess), i};
  }
  if (common != guess) {  // the guess was too long: take the keys again
    for (size_t i = 0; i < n; ++i) {
      common = std::min(common, CommonPrefix(first, key((*items)[i])));
    }
    for (size_t i = 0; i < n; ++i)
      keyed[i].first = KeyAt(key((*items)[i]), common);
  }
  RadixSortByFirst(&keyed);
  // Equal integer keys (rare) are ordered by the full strings.
  bool duplicates = false;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && keyed[j].first == keyed[i].first) ++j;
    if (j - i > 1) {
      std::sort(keyed.begin() + i, keyed.begin() + j,
                [&](const auto& a, const auto& b) {
                  return key((*items)[a.second]) < key((*items)[b.second]);
                });
      for (size_t k = i + 1; k < j && !duplicates; ++k) {
        duplicates = key((*items)[keyed[k].second]) ==
                     key((*items)[keyed[k - 1].second]);
      }
    }
    i = j;
  }
  std::vector<T> sorted;
  sorted.reserve(n);
  for (const auto& [k, i] : keyed) sorted.push_back(std::move((*items)[i]));
  if (from != nullptr) {
    for (size_t k = 0; k < n; ++k) {
      (*from)[k] = static_cast<uint32_t>(keyed[k].second);
    }
  }
  *items = std::move(sorted);
  return duplicates;
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_STRING_SORT_H_
