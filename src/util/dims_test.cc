#include "reshard/dims.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace reshard {
namespace {

// The values of `d` as a std::vector, to compare against expectations.
std::vector<int64_t> Values(const Dims& d) { return {d.begin(), d.end()}; }

TEST(DimsTest, KeepsUpToThreeValuesInPlace) {
  Dims d = {1, 2, 3};
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.capacity(), Dims::kInlineDims);
  // In place: the values live inside the object itself.
  const auto* self = reinterpret_cast<const char*>(&d);
  const auto* data = reinterpret_cast<const char*>(d.data());
  EXPECT_GE(data, self);
  EXPECT_LT(data, self + sizeof(Dims));
  EXPECT_EQ(Values(d), (std::vector<int64_t>{1, 2, 3}));
  // A fourth value goes to the heap, with the first three.
  d.push_back(4);
  EXPECT_GT(d.capacity(), Dims::kInlineDims);
  const auto* heap = reinterpret_cast<const char*>(d.data());
  EXPECT_TRUE(heap < self || heap >= self + sizeof(Dims));
  EXPECT_EQ(Values(d), (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(DimsTest, GrowsOntoTheHeapBeyondThree) {
  Dims d;
  for (int64_t v = 0; v < 40; ++v) d.push_back(v * v);
  ASSERT_EQ(d.size(), 40u);
  EXPECT_GE(d.capacity(), 40u);
  for (int64_t v = 0; v < 40; ++v) EXPECT_EQ(d[v], v * v) << v;
  EXPECT_EQ(d.front(), 0);
  EXPECT_EQ(d.back(), 39 * 39);
  d.resize(3);
  EXPECT_EQ(Values(d), (std::vector<int64_t>{0, 1, 4}));
  d.resize(5, -7);
  EXPECT_EQ(Values(d), (std::vector<int64_t>{0, 1, 4, -7, -7}));
}

TEST(DimsTest, CopiesAndMovesKeepValuesOfBothKinds) {
  for (size_t n : {size_t{0}, size_t{3}, size_t{4}, size_t{5}, size_t{17}}) {
    Dims a;
    for (size_t i = 0; i < n; ++i) a.push_back(static_cast<int64_t>(i) - 2);
    const std::vector<int64_t> want = Values(a);
    Dims copy = a;
    EXPECT_EQ(Values(copy), want) << n;
    Dims moved = std::move(copy);
    EXPECT_EQ(Values(moved), want) << n;
    EXPECT_TRUE(copy.empty()) << n;  // NOLINT: moved-from state is specified
    Dims assigned = {9, 9, 9, 9, 9, 9};
    assigned = moved;
    EXPECT_EQ(Values(assigned), want) << n;
    Dims move_assigned = {1};
    move_assigned = std::move(assigned);
    EXPECT_EQ(Values(move_assigned), want) << n;
    // The moved-from object is usable again.
    assigned.push_back(5);
    EXPECT_EQ(Values(assigned), (std::vector<int64_t>{5})) << n;
    Dims& self = move_assigned;
    move_assigned = self;
    EXPECT_EQ(Values(move_assigned), want) << n;
  }
}

TEST(DimsTest, ConstructsFromCountsRangesAndVectors) {
  EXPECT_EQ(Values(Dims(3, 8)), (std::vector<int64_t>{8, 8, 8}));
  EXPECT_EQ(Values(Dims(2)), (std::vector<int64_t>{0, 0}));
  const std::vector<int64_t> v = {4, 5, 6, 7, 8, 9};
  EXPECT_EQ(Values(Dims(v)), v);
  EXPECT_EQ(Values(Dims(v.begin() + 1, v.begin() + 3)),
            (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(Dims(v).ToVector(), v);
  Dims d;
  d.assign(size_t{6}, int64_t{1});
  EXPECT_EQ(Values(d), (std::vector<int64_t>(6, 1)));
  d.clear();
  EXPECT_TRUE(d.empty());
}

TEST(DimsTest, InsertsAndErases) {
  Dims d = {1, 3, 4, 5};
  auto it = d.insert(d.begin() + 1, 2);  // grows past the inline four
  EXPECT_EQ(*it, 2);
  EXPECT_EQ(Values(d), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  it = d.erase(d.begin());
  EXPECT_EQ(*it, 2);
  EXPECT_EQ(Values(d), (std::vector<int64_t>{2, 3, 4, 5}));
  d.pop_back();
  EXPECT_EQ(Values(d), (std::vector<int64_t>{2, 3, 4}));
}

TEST(DimsTest, ComparesLikeAVector) {
  EXPECT_EQ(Dims({1, 2}), Dims({1, 2}));
  EXPECT_NE(Dims({1, 2}), Dims({1, 2, 0}));
  EXPECT_LT(Dims({1, 2}), Dims({1, 2, 0}));
  EXPECT_LT(Dims({1, 2, 9}), Dims({1, 3}));
  EXPECT_GT(Dims({2}), Dims({1, 9, 9, 9, 9, 9}));
  EXPECT_LT(Dims{}, Dims({0}));
  // Heap and inline values compare by value.
  Dims heap = {1, 2, 3, 4, 5};
  heap.resize(2);
  EXPECT_EQ(heap, Dims({1, 2}));
}

}  // namespace
}  // namespace reshard
