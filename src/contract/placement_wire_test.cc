// The placement wire: golden identities of the fixtures and scenarios,
// byte-identical round trips, and the strict decoder's rules
// (docs/wire-format.md).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>
#include <string>

#include "reshard/placement.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::testing::HasSubstr;
using testing::ReadTestData;

struct Golden {
  std::string file;
  std::string placement_id;
  std::string digest;
  std::string topology_id;
  uint64_t fragments;
};

// expected.json of the fixtures ({file: {...}}) and of the scenarios
// ({"placements": {file: {...}}}).
std::vector<Golden> LoadGoldens(const std::string& dir, bool nested) {
  const std::string text = ReadTestData(dir + "/expected.json");
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(text);
  simdjson::dom::object table = nested
                                    ? simdjson::dom::object(root["placements"])
                                    : simdjson::dom::object(root);
  std::vector<Golden> out;
  for (auto [key, value] : table) {
    out.push_back({dir + "/" + std::string(key),
                   std::string(std::string_view(value["placement_id"])),
                   std::string(std::string_view(value["digest"])),
                   std::string(std::string_view(value["topology_id"])),
                   uint64_t(value["fragments"])});
  }
  return out;
}

void CheckGoldens(const std::vector<Golden>& goldens) {
  ASSERT_FALSE(goldens.empty());
  for (const Golden& g : goldens) {
    SCOPED_TRACE(g.file);
    const std::string text = ReadTestData(g.file);
    ASSERT_OK_AND_ASSIGN(auto m, WeightPlacementFromJson(text));
    EXPECT_EQ(m.placement_id(), g.placement_id);
    EXPECT_EQ(m.digest(), g.digest);
    EXPECT_EQ(m.topology().topology_id(), g.topology_id);
    EXPECT_EQ(m.fragments().size(), g.fragments);
    // The files are canonical: encode(decode(x)) == x, byte for byte.
    EXPECT_EQ(WeightPlacementToJson(m), text);
  }
}

TEST(PlacementWireTest, FixtureGoldenIdentities) {
  CheckGoldens(LoadGoldens("fixtures/placements", /*nested=*/false));
}

TEST(PlacementWireTest, ScenarioGoldenIdentities) {
  CheckGoldens(LoadGoldens("scenarios", /*nested=*/true));
}

TEST(PlacementWireTest, PlanFixturePlacementsValidate) {
  for (const auto& entry : std::filesystem::directory_iterator(
           std::string(RESHARD_TEST_DATA) + "/fixtures/plans")) {
    const std::string name = entry.path().filename().string();
    if (name == "expected.json") continue;
    SCOPED_TRACE(name);
    const std::string text = ReadTestData("fixtures/plans/" + name);
    ASSERT_OK_AND_ASSIGN(auto m, WeightPlacementFromJson(text));
    EXPECT_EQ(WeightPlacementToJson(m), text);
  }
}

TEST(PlacementWireTest, NonCanonicalInputDecodesToCanonicalForm) {
  // Reordered keys and whitespace decode to the same manifest.
  const std::string text =
      ReadTestData("fixtures/placements/placement_100.json");
  std::string spaced;
  for (char c : text) {
    spaced += c;
    if (c == ',') spaced += "\n  ";
  }
  ASSERT_OK_AND_ASSIGN(auto m, WeightPlacementFromJson(spaced));
  EXPECT_EQ(WeightPlacementToJson(m), text);
}

class WireMutationTest : public ::testing::Test {
 protected:
  // Replaces the first occurrence of `from` in the golden fixture.
  static std::string Mutate(const std::string& from, const std::string& to) {
    std::string text = ReadTestData("fixtures/placements/placement_100.json");
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    return text;
  }
  static std::string Error(const std::string& text) {
    auto m = WeightPlacementFromJson(text);
    return m.ok() ? "OK" : m.status().message();
  }
};

TEST_F(WireMutationTest, ResourceKindMustBeModelWeight) {
  EXPECT_EQ(Error(Mutate("\"model_weight\"", "\"kv_cache\"")),
            "placement manifest resource_kind must be model_weight, got "
            "\"kv_cache\"");
}

TEST_F(WireMutationTest, UnknownAndMissingFields) {
  EXPECT_EQ(Error(Mutate("{\"parts\":", "{\"extra\":1,\"parts\":")),
            "$: placement manifest schema fields do not match contract: "
            "unknown field \"extra\"");
  EXPECT_EQ(Error(Mutate("\"revision\":\"step-7\",", "")),
            "$: placement manifest schema fields do not match contract: "
            "missing field \"revision\"");
  EXPECT_EQ(Error(Mutate("\"aliases\":[],", "")),
            "parts[0].fragments[0]: placement fragment schema fields do not "
            "match contract: missing field \"aliases\"");
}

TEST_F(WireMutationTest, DuplicateKeyRejected) {
  EXPECT_EQ(Error(Mutate("{\"parts\":", "{\"revision\":\"x\",\"parts\":")),
            "$: duplicate JSON field \"revision\"");
}

TEST_F(WireMutationTest, NonFiniteRejected) {
  EXPECT_EQ(Error(Mutate("\"nbytes\":32", "\"nbytes\":NaN")),
            "non-finite JSON number is unsupported");
  EXPECT_EQ(Error(Mutate("\"nbytes\":32", "\"nbytes\":Infinity")),
            "non-finite JSON number is unsupported");
}

TEST_F(WireMutationTest, IntegersAreStrict) {
  EXPECT_EQ(Error(Mutate("\"nbytes\":32", "\"nbytes\":true")),
            "parts[0].fragments[0].nbytes must be an integer");
  EXPECT_EQ(Error(Mutate("\"nbytes\":32", "\"nbytes\":32.0")),
            "parts[0].fragments[0].nbytes must be an integer");
  EXPECT_EQ(Error(Mutate("\"nbytes\":32", "\"nbytes\":-32")),
            "parts[0].fragments[0].nbytes must fit in an unsigned 64-bit "
            "integer");
  EXPECT_EQ(Error(Mutate("\"weight_generation\":0",
                         "\"weight_generation\":18446744073709551616")),
            "JSON integer must fit in an unsigned 64-bit integer");
  EXPECT_EQ(Error(Mutate("\"dp\":0", "\"dp\":\"0\"")),
            "parts[0].fragments[0].rank.dp must be an integer");
}

TEST_F(WireMutationTest, IdsMustMatchCanonicalContent) {
  ASSERT_OK_AND_ASSIGN(auto m, WeightPlacementFromJson(ReadTestData(
                                   "fixtures/placements/placement_100.json")));
  EXPECT_THAT(
      Error(Mutate(m.placement_id(), "sha256:" + std::string(64, '0'))),
      HasSubstr("placement_id does not match canonical logical content"));
  EXPECT_THAT(Error(Mutate(m.topology().topology_id(),
                           "sha256:" + std::string(64, '1'))),
              HasSubstr("topology: topology_id does not match canonical "
                        "topology"));
  // Tampered content with the old ids is caught by the placement_id.
  EXPECT_THAT(
      Error(Mutate("\"revision\":\"step-7\"", "\"revision\":\"step-8\"")),
      HasSubstr("placement_id does not match canonical logical "
                "content"));
}

TEST_F(WireMutationTest, UnreferencedAndUnknownTensors) {
  EXPECT_THAT(Error(Mutate("\"tensor_id\":\"layers.2.w2\"",
                           "\"tensor_id\":\"layers.2.zz\"")),
              HasSubstr("placement part references an unknown tensor: "
                        "layers.2.zz"));
}

TEST_F(WireMutationTest, EmptyIdsRejected) {
  EXPECT_EQ(Error(Mutate("\"resource_id\":\"fixture-model\"",
                         "\"resource_id\":\"\"")),
            "resource_id must be a non-empty string");
}

TEST_F(WireMutationTest, AxisWireForms) {
  EXPECT_THAT(
      Error(Mutate("\"semantics\":\"split\"", "\"semantics\":\"sharded\"")),
      HasSubstr("unsupported parallel axis semantics \"sharded\""));
  EXPECT_THAT(Error(Mutate("\"kind\":\"ep\"", "\"kind\":\"cp\"")),
              HasSubstr("unsupported parallel axis kind: \"cp\""));
}

TEST(PlacementWireTest, MalformedJson) {
  EXPECT_THAT(WeightPlacementFromJson("{\"parts\":[").status().message(),
              HasSubstr("invalid JSON"));
  EXPECT_EQ(WeightPlacementFromJson("[]").status().message(),
            "$ must be a JSON object");
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

// Documents over 4 MiB decode their parts on two threads; the result and
// the first error must not depend on that.
TEST(PlacementWireTest, LargeDocumentsDecodeInParallelDeterministically) {
  ASSERT_OK_AND_ASSIGN(auto built, testing::LargeExpertDraft().Build());
  const std::string text = WeightPlacementToJson(built);
  ASSERT_GT(text.size(), size_t{4} << 20);
  ASSERT_OK_AND_ASSIGN(auto decoded, WeightPlacementFromJson(text));
  EXPECT_EQ(decoded.placement_id(), built.placement_id());
  EXPECT_EQ(decoded.digest(), built.digest());
  EXPECT_EQ(WeightPlacementToJson(decoded), text);
  // Corrupt one fragment in the last part (decoded by the second thread)
  // and one in the first part: the first part's error is reported.
  std::string bad = text;
  const size_t last = bad.rfind("\"nbytes\":128");
  ASSERT_NE(last, std::string::npos);
  bad.replace(last, 12, "\"nbytes\":127");
  EXPECT_THAT(WeightPlacementFromJson(bad).status().message(),
              ::testing::StartsWith("parts[255]: fragment byte size mismatch"));
  const size_t first = bad.find("\"nbytes\":128");
  bad.replace(first, 12, "\"nbytes\":129");
  EXPECT_THAT(WeightPlacementFromJson(bad).status().message(),
              ::testing::StartsWith("parts[0]: fragment byte size mismatch"));
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

// A byte size whose product wraps around 2^128 must not match nbytes.
TEST(PlacementWireTest, WrappedByteSizeIsAMismatch) {
  TensorDescriptorSpec t{
      .tensor_id = "w",
      .global_shape = {int64_t{1} << 62, int64_t{1} << 62, int64_t{1} << 62},
      .dtype = "uint8",
      .itemsize = 1,
      .layout_fingerprint = "x"};
  ASSERT_OK_AND_ASSIGN(auto f,
                       PlacementFragment::Make(
                           {.tensor_id = "w",
                            .global_offset = {0, 0, 0},
                            .local_shape = {int64_t{1} << 62, int64_t{1} << 62,
                                            int64_t{1} << 62},
                            .nbytes = 0 + 1,
                            .placement_fragment_id = "f"}));
  WeightPlacementPartSpec s{{"r", "v", 1, "set"},         "sha256:t", "p", {},
                            {*TensorDescriptor::Make(t)}, {f}};
  EXPECT_EQ(WeightPlacementPart::Make(s).status().message(),
            "fragment byte size mismatch: f: expected more than 2^64-1, got "
            "1");
}

}  // namespace
}  // namespace reshard
