#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "reshard/hf.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;

std::string Prefix(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = char(n >> (8 * i));
  return s;
}

// Parses `json` as the header of a file with `data` bytes of data.
Result<SafetensorsHeader> Parse(const std::string& json, uint64_t data) {
  return ParseSafetensorsHeader("f.safetensors", json, 8 + json.size() + data);
}

TEST(SafetensorsTest, ParsesTensorsInDataOrderWithMetadata) {
  std::string json =
      R"({"__metadata__":{"format":"pt"},)"
      R"("b":{"dtype":"BF16","shape":[2,3],"data_offsets":[8,20]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("z":{"dtype":"I64","shape":[0],"data_offsets":[20,20]}})";
  json.resize((json.size() + 8 + 7) / 8 * 8 - 8, ' ');  // aligned data
  ASSERT_OK_AND_ASSIGN(auto h, Parse(json, 20));
  EXPECT_EQ(h.data_offset, 8 + json.size());
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[1].dtype, "BF16");
  EXPECT_EQ(h.tensors[1].shape, (Dims{2, 3}));
  EXPECT_EQ(h.tensors[2].name, "z");
  EXPECT_EQ(h.metadata.at("format"), "pt");
}

TEST(SafetensorsTest, EveryDtypeHasItsSizeAndPlacementName) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  for (const auto& [name, size] : sizes) {
    const SafetensorsDtype* d = FindSafetensorsDtype(name);
    ASSERT_NE(d, nullptr) << name;
    EXPECT_EQ(d->itemsize, size) << name;
    EXPECT_EQ(FindSafetensorsDtypeByPlacement(d->placement), d) << name;
  }
  EXPECT_EQ(FindSafetensorsDtype("F4"), nullptr);
  EXPECT_EQ(FindSafetensorsDtype("bf16"), nullptr);
}

TEST(SafetensorsTest, PrefixErrorsNameTheFile) {
  EXPECT_THAT(ParseSafetensorsPrefix("x.safetensors", "abc", 3),
              StatusIs(StatusCode::kInvalidArgument,
                       "x.safetensors: truncated safetensors header: 3 bytes, "
                       "shorter than the 8-byte length"));
  EXPECT_THAT(ParseSafetensorsPrefix("x.safetensors", Prefix(100), 50),
              StatusIs(StatusCode::kInvalidArgument,
                       "x.safetensors: safetensors header length 100 runs "
                       "past the end of the file (50 bytes)"));
  EXPECT_THAT(
      ParseSafetensorsPrefix("x.safetensors", Prefix(uint64_t{1} << 62),
                             uint64_t{1} << 63),
      StatusIs(StatusCode::kInvalidArgument,
               "x.safetensors: safetensors header length 4611686018427387904 "
               "exceeds 100000000 bytes"));
  EXPECT_THAT(ParseSafetensorsPrefix("x.safetensors", Prefix(UINT64_MAX), 64),
              StatusIs(StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("exceeds 100000000 bytes")));
  ASSERT_OK_AND_ASSIGN(auto n, ParseSafetensorsPrefix("x", Prefix(16), 24));
  EXPECT_EQ(n, 16u);
}

TEST(SafetensorsTest, OverlappingTensorsAreRefusedNamingBoth) {
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
            12),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor b: data_offsets [4, 12) overlap tensor "
               "a [0, 8)"));
}

TEST(SafetensorsTest, OutOfRangeHolesAndTrailingBytesAreRefused) {
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 4),
      StatusIs(StatusCode::kOutOfRange,
               "f.safetensors: tensor a: data_offsets [0, 8) past the end of "
               "the data (4 bytes)"));
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 8),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor a: data_offsets begin 4 leaves a hole "
               "of 4 bytes after the header"));
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 6),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: 2 bytes of data after the last tensor a"));
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", 8),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor a: data_offsets [8, 4) end before "
               "begin"));
}

TEST(SafetensorsTest, DtypeShapeAndSizeMustAgree) {
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor a: BF16 shape [3] is 6 bytes but "
               "data_offsets [0, 8) hold 8"));
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"Q4","shape":[3],"data_offsets":[0,3]}})", 3),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor a: unknown dtype Q4"));
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor a: negative dimension in shape [-1]"));
  // 2^62 x 2^2 x 4 bytes does not fit in 64 bits.
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],)"
            R"("data_offsets":[0,0]}})",
            0),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor a: F32 shape [4611686018427387904, 4] "
               "is more than 2^64 bytes but data_offsets [0, 0) hold 0"));
}

TEST(SafetensorsTest, MisalignedTensorsAreRefused) {
  // The data starts at a multiple of 8: F32 at data offset 2 is not
  // aligned.
  std::string json = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})";
  json.resize((json.size() + 8 + 7) / 8 * 8 - 8, ' ');
  EXPECT_THAT(Parse(json, 6),
              StatusIs(StatusCode::kInvalidArgument,
                       "f.safetensors: tensor b: misaligned: F32 data at file "
                       "offset " +
                           std::to_string(8 + json.size() + 2) +
                           " is not a multiple of 4"));
}

TEST(SafetensorsTest, MalformedJsonAndFieldsAreRefused) {
  EXPECT_THAT(Parse(R"([1,2])", 0),
              StatusIs(StatusCode::kInvalidArgument,
                       "f.safetensors: safetensors header must start with "
                       "'{'"));
  EXPECT_THAT(Parse(R"({"a":)", 0),
              StatusIs(StatusCode::kInvalidArgument,
                       ::testing::StartsWith(
                           "f.safetensors: safetensors header: invalid JSON")));
  EXPECT_THAT(Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                    R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                    2),
              StatusIs(StatusCode::kInvalidArgument,
                       "f.safetensors: duplicate tensor a in the header"));
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})",
            1),
      StatusIs(StatusCode::kInvalidArgument,
               ::testing::StartsWith("f.safetensors: tensor a: ")));
  EXPECT_THAT(
      Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 1),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor a: data_offsets must be [begin, end]"));
  EXPECT_THAT(Parse(R"({"__metadata__":{"k":1}})", 0),
              StatusIs(StatusCode::kInvalidArgument,
                       "f.safetensors: __metadata__ k must be a string"));
  EXPECT_THAT(
      Parse(R"({"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor with an empty name"));
}

TEST(SafetensorsTest, ControlCharactersInNamesAreEscaped) {
  EXPECT_THAT(
      Parse(R"({"a\nreshard: ok":{"dtype":"Q","shape":[1],)"
            R"("data_offsets":[0,1]}})",
            1),
      StatusIs(StatusCode::kInvalidArgument,
               "f.safetensors: tensor a\\nreshard: ok: unknown dtype Q"));
}

}  // namespace
}  // namespace reshard
