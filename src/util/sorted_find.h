// Lookup by id in a vector sorted by that id.

#ifndef RESHARD_UTIL_SORTED_FIND_H_
#define RESHARD_UTIL_SORTED_FIND_H_

#include <algorithm>
#include <string_view>
#include <vector>

namespace reshard::internal {

// The element of `sorted` (ascending by key(element)) whose key equals
// `id`, or nullptr.
template <typename T, typename KeyFn>
auto FindSorted(const std::vector<T>& sorted, std::string_view id, KeyFn key)
    -> const T* {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), id,
                             [&](const T& e, std::string_view x) {
                               return std::string_view(key(e)) < x;
                             });
  return it != sorted.end() && std::string_view(key(*it)) == id ? &*it
                                                                : nullptr;
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_SORTED_FIND_H_
