// Dims: the coordinates or extents of an N-D box, one int64_t per dimension.
//
// A placement of a trillion-parameter model holds millions of fragment boxes
// and a plan as many regions, each with two of these. The weights of a
// language model have at most three dimensions (fused experts: expert, rows,
// columns), so Dims keeps kInlineDims = 3 values in place, 32 bytes in all,
// and reaches for the heap only beyond them: a fragment or a region costs no
// allocation for its box. The interface is the part of std::vector<int64_t>
// that box arithmetic uses.

#ifndef RESHARD_DIMS_H_
#define RESHARD_DIMS_H_

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace reshard {

class Dims {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  // Values kept in place; more go to the heap.
  static constexpr size_t kInlineDims = 3;

  Dims() noexcept = default;
  // `n` copies of `value`.
  explicit Dims(size_t n, int64_t value = 0) { assign(n, value); }
  Dims(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
  }
  template <typename It,
            typename = std::enable_if_t<std::is_base_of_v<
                std::input_iterator_tag,
                typename std::iterator_traits<It>::iterator_category>>>
  Dims(It first, It last) {
    assign(first, last);
  }
  Dims(std::span<const int64_t> values) {  // NOLINT: implicit, like a copy
    assign(values.begin(), values.end());
  }
  Dims(const std::vector<int64_t>& values)  // NOLINT: implicit, like a copy
      : Dims(std::span<const int64_t>(values)) {}

  Dims(const Dims& other) { assign(other.begin(), other.end()); }
  Dims(Dims&& other) noexcept { MoveFrom(&other); }
  Dims& operator=(const Dims& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Dims& operator=(Dims&& other) noexcept {
    if (this != &other) {
      Release();
      MoveFrom(&other);
    }
    return *this;
  }
  Dims& operator=(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~Dims() { Release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  int64_t* data() { return on_heap() ? heap_ : inline_; }
  const int64_t* data() const { return on_heap() ? heap_ : inline_; }

  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  std::reverse_iterator<iterator> rbegin() {
    return std::reverse_iterator<iterator>(end());
  }
  std::reverse_iterator<iterator> rend() {
    return std::reverse_iterator<iterator>(begin());
  }
  std::reverse_iterator<const_iterator> rbegin() const {
    return std::reverse_iterator<const_iterator>(end());
  }
  std::reverse_iterator<const_iterator> rend() const {
    return std::reverse_iterator<const_iterator>(begin());
  }

  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  int64_t& front() { return data()[0]; }
  const int64_t& front() const { return data()[0]; }
  int64_t& back() { return data()[size_ - 1]; }
  const int64_t& back() const { return data()[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) Grow(n);
  }
  void clear() { size_ = 0; }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t value) {
    if (size_ == capacity_) Grow(size_t{capacity_} * 2);
    data()[size_++] = value;
  }
  void emplace_back(int64_t value) { push_back(value); }
  void pop_back() { --size_; }
  void assign(size_t n, int64_t value) {
    size_ = 0;
    resize(n, value);
  }
  template <typename It>
  void assign(It first, It last) {
    if constexpr (std::is_base_of_v<
                      std::forward_iterator_tag,
                      typename std::iterator_traits<It>::iterator_category>) {
      const auto n = static_cast<size_t>(std::distance(first, last));
      size_ = 0;
      reserve(n);
      std::copy(first, last, data());
      size_ = static_cast<uint32_t>(n);
    } else {
      size_ = 0;
      for (; first != last; ++first) push_back(*first);
    }
  }
  // Inserts `value` before `pos`; returns an iterator to it.
  iterator insert(const_iterator pos, int64_t value) {
    const size_t at = static_cast<size_t>(pos - begin());
    push_back(value);
    std::rotate(begin() + at, end() - 1, end());
    return begin() + at;
  }
  // Removes the value at `pos`; returns an iterator to the one after it.
  iterator erase(const_iterator pos) {
    const size_t at = static_cast<size_t>(pos - begin());
    std::copy(begin() + at + 1, end(), begin() + at);
    --size_;
    return begin() + at;
  }

  // The values as a std::vector, for interfaces that take one.
  std::vector<int64_t> ToVector() const { return {begin(), end()}; }

  friend bool operator==(const Dims& a, const Dims& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend std::strong_ordering operator<=>(const Dims& a, const Dims& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(),
                                                  b.end());
  }

 private:
  bool on_heap() const { return capacity_ > kInlineDims; }

  void Grow(size_t n) {
    n = std::max(n, size_t{kInlineDims} * 2);
    auto* fresh = new int64_t[n];
    std::copy(begin(), end(), fresh);
    Release();
    heap_ = fresh;
    capacity_ = static_cast<uint32_t>(n);
  }
  void Release() {
    if (on_heap()) delete[] heap_;
    capacity_ = kInlineDims;
  }
  // Takes `other`'s values; `other` is left empty and inline.
  void MoveFrom(Dims* other) noexcept {
    size_ = other->size_;
    capacity_ = other->capacity_;
    if (other->on_heap()) {
      heap_ = other->heap_;
    } else {
      std::memcpy(inline_, other->inline_, sizeof(int64_t) * size_);
    }
    other->size_ = 0;
    other->capacity_ = kInlineDims;
  }

  uint32_t size_ = 0;
  uint32_t capacity_ = kInlineDims;
  union {
    int64_t inline_[kInlineDims];
    int64_t* heap_;
  };
};

static_assert(sizeof(Dims) == 32, "Dims: three values and two counts");

}  // namespace reshard

#endif  // RESHARD_DIMS_H_
