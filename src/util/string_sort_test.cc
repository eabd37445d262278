// Tests of SortByStringKey and RadixSortByFirst against std::sort: ids with
// a long common prefix, keys that tie in their first eight distinguishing
// bytes, strings shorter than the prefix window, duplicates, and a common
// prefix guessed from a sample that the other strings do not share.

#include "util/string_sort.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace reshard::internal {
namespace {

std::vector<std::string> SortedCopy(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(StringSortTest, MatchesStdSortOnHashLikeIds) {
  std::mt19937_64 rng(7);
  std::vector<std::string> ids;
  for (int i = 0; i < 5000; ++i) {
    std::string id = "sha256:";
    for (int c = 0; c < 64; ++c) id += "0123456789abcdef"[rng() % 16];
    ids.push_back(id);
  }
  std::vector<std::string> got = ids;
  EXPECT_FALSE(SortByStringKey(
      &got, [](const std::string& s) -> const std::string& { return s; }));
  EXPECT_EQ(got, SortedCopy(ids));
}

TEST(StringSortTest, GivesThePermutationItApplied) {
  std::mt19937_64 rng(11);
  std::vector<std::string> ids;
  for (int i = 0; i < 3000; ++i) {
    ids.push_back("id:" + std::to_string(rng() % 100000));
  }
  ids.push_back(ids[5]);  // a duplicate keeps its place in the permutation
  std::vector<std::string> got = ids;
  std::vector<uint32_t> from = {9, 9};  // replaced, not appended to
  EXPECT_TRUE(SortByStringKey(
      &got, [](const std::string& s) -> const std::string& { return s; },
      &from));
  EXPECT_EQ(got, SortedCopy(ids));
  ASSERT_EQ(from.size(), ids.size());
  std::vector<uint32_t> seen = from;
  std::sort(seen.begin(), seen.end());
  for (uint32_t k = 0; k < seen.size(); ++k) ASSERT_EQ(seen[k], k);
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], ids[from[k]]);
  std::vector<std::string> one = {"x"};
  EXPECT_FALSE(SortByStringKey(
      &one, [](const std::string& s) -> const std::string& { return s; },
      &from));
  EXPECT_EQ(from, std::vector<uint32_t>{0});
}

TEST(StringSortTest, ReportsDuplicatesOnlyWhereStringsAreEqual) {
  auto self = [](const std::string& s) -> const std::string& { return s; };
  // Equal 8-byte keys after the prefix, different strings: no duplicate.
  std::vector<std::string> distinct = {"id:abcdefgh2", "id:abcdefgh1", "id:x"};
  EXPECT_FALSE(SortByStringKey(&distinct, self));
  std::vector<std::string> twice = {"id:abcdefgh2", "id:x", "id:abcdefgh2"};
  EXPECT_TRUE(SortByStringKey(&twice, self));
  EXPECT_EQ(twice, SortedCopy(twice));
  std::vector<std::string> short_twice = {"id:q", "id:x", "id:q", "id:a"};
  EXPECT_TRUE(SortByStringKey(&short_twice, self));
  EXPECT_EQ(short_twice,
            (std::vector<std::string>{"id:a", "id:q", "id:q", "id:x"}));
}

TEST(StringSortTest, APrefixSharedByTheSampledItemsOnlyIsNotTrusted) {
  // First, middle and last share "sha256:aaaa"; others do not, so keys
  // taken after that guessed prefix would be wrong.
  std::vector<std::string> ids = {"sha256:aaaa9", "sha256:b1", "sha256:aaaa1",
                                  "sha256:a0", "sha256:aaaa5"};
  std::vector<std::string> got = ids;
  EXPECT_FALSE(SortByStringKey(
      &got, [](const std::string& s) -> const std::string& { return s; }));
  EXPECT_EQ(got, SortedCopy(ids));
  // And a string shorter than the guessed prefix.
  ids = {"zzzz1", "z", "zzzz3", "zzzz0", "zzzz2"};
  got = ids;
  EXPECT_FALSE(SortByStringKey(
      &got, [](const std::string& s) -> const std::string& { return s; }));
  EXPECT_EQ(got, SortedCopy(ids));
}

TEST(StringSortTest, TiesInTheKeyWindowFallBackToFullStrings) {
  // Same first 8 bytes after the common prefix "p:", differing later; and
  // strings that end inside the window, and exact duplicates.
  std::vector<std::string> ids = {
      "p:abcdefghZ", "p:abcdefghA",    "p:abc",
      "p:abcdefgh",  "p:abcdefghA",    "p:",
      "p:b",         "p:abcdefgh\x01", "p:abcdefgh\xff"};
  std::vector<std::string> got = ids;
  EXPECT_TRUE(SortByStringKey(  // "p:abcdefghA" twice
      &got, [](const std::string& s) -> const std::string& { return s; }));
  EXPECT_EQ(got, SortedCopy(ids));
}

TEST(StringSortTest, IndicesSortByTheirStrings) {
  const std::vector<std::string> names = {"w", "b", "zz", "a", "b0"};
  std::vector<size_t> idx = {0, 1, 2, 3, 4};
  SortByStringKey(&idx,
                  [&](size_t i) -> const std::string& { return names[i]; });
  EXPECT_EQ(idx, (std::vector<size_t>{3, 1, 4, 0, 2}));
}

TEST(StringSortTest, RadixSortIsStableAndMatchesStdStableSort) {
  std::mt19937_64 rng(11);
  std::vector<std::pair<uint64_t, size_t>> v;
  for (size_t i = 0; i < 20000; ++i) {
    // Few distinct high bytes, many ties, all eight bytes exercised.
    const uint64_t k = (rng() % 4) << 56 | (rng() % 3) << 20 | (rng() % 50);
    v.emplace_back(k, i);
  }
  auto expected = v;
  std::stable_sort(
      expected.begin(), expected.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  RadixSortByFirst(&v);
  EXPECT_EQ(v, expected);
}

TEST(StringSortTest, RadixSortByKeySortsPlainIntegers) {
  std::mt19937_64 rng(13);
  std::vector<uint64_t> v;
  for (int i = 0; i < 10000; ++i) {
    v.push_back(i % 3 == 0 ? rng() : (rng() % 1000) << 40 | (rng() % 7));
  }
  auto expected = v;
  std::sort(expected.begin(), expected.end());
  RadixSortByKey(&v, [](uint64_t k) { return k; });
  EXPECT_EQ(v, expected);
}

TEST(StringSortTest, RadixSortOfAllEqualKeysKeepsOrder) {
  std::vector<std::pair<uint64_t, size_t>> v = {{5, 2}, {5, 0}, {5, 1}};
  RadixSortByFirst(&v);
  EXPECT_EQ(v,
            (std::vector<std::pair<uint64_t, size_t>>{{5, 2}, {5, 0}, {5, 1}}));
}

}  // namespace
}  // namespace reshard::internal
