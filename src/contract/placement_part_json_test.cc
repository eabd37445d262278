// The JSON record of one part: its exact text, the round trip, and the
// exact words of each refusal.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "reshard/placement.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using testing::CubeLayout;
using testing::StatusIs;

constexpr char kCubePartJson[] =
    R"({"fragments":[{"aliases":[],"global_offset":[2,0],"local_shape":[2,3],)"
    R"("nbytes":6,"placement_fragment_id":"sha256:6c38e1b6ecdaa4e76be1ea7873de)"
    R"(66d81f89fac07778122dcd16d38f0b9a9701","rank":{"dp":0,"ep":0,"pp":0,)"
    R"("tp":1},"tensor_id":"w"}],"participant_id":"p-d0-p0-e0-t1",)"
    R"("placement_set_id":"demo-set","rank":{"dp":0,"ep":0,"pp":0,"tp":1},)"
    R"("record":"weight-placement-part","resource_id":"demo-model",)"
    R"("revision":"step-1","tensors":[{"dtype":"uint8","expert_id":null,)"
    R"("global_shape":[4,3],"itemsize":1,"layer_id":null,)"
    R"("layout_fingerprint":"uint8:row-major","parallel_axes":[{"dim":0,)"
    R"("kind":"tp","semantics":"split"}],"shard_dims":[0],"tensor_id":"w"}],)"
    R"("topology_id":"sha256:d45d4b493ac28ad7e4f9e8ad0f8e199e42eec73ac0474b2)"
    R"(61cec9fc6633c9c30","weight_generation":1})";

// Participant 1's part of a uint8 [4, 3] tensor split two ways on dim 0.
const WeightPlacementPart& CubePart() {
  static const WeightPlacementManifest m = CubeLayout(2, 0, {4, 3});
  return m.parts()[1];
}

// CubePart's record with `from` replaced by `to` (which must occur).
std::string Edited(const std::string& from, const std::string& to) {
  std::string text = WeightPlacementPartToJson(CubePart());
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(PlacementPartJsonTest, WritesTheCanonicalRecord) {
  const std::string text = WeightPlacementPartToJson(CubePart());
  EXPECT_EQ(text, kCubePartJson);
}

TEST(PlacementPartJsonTest, ReadsItsOwnRecordBack) {
  const std::string text = WeightPlacementPartToJson(CubePart());
  ASSERT_OK_AND_ASSIGN(auto back, WeightPlacementPartFromJson(text));
  EXPECT_EQ(back.participant_id(), CubePart().participant_id());
  EXPECT_EQ(back.rank(), CubePart().rank());
  EXPECT_EQ(back.topology_id(), CubePart().topology_id());
  EXPECT_EQ(back.tensors(), CubePart().tensors());
  EXPECT_EQ(back.fragments(), CubePart().fragments());
  EXPECT_EQ(WeightPlacementPartToJson(back), text);
}

TEST(PlacementPartJsonTest, KeepsEveryAxisExtension) {
  // A partial split ("ranks") is written and read back as the wire has it.
  ASSERT_OK_AND_ASSIGN(auto axis, PartialSplitAxis(AxisKind::kTp, 0, 2));
  ASSERT_OK_AND_ASSIGN(auto tensor,
                       TensorDescriptor::Make({.tensor_id = "v",
                                               .global_shape = {6, 4},
                                               .dtype = "uint8",
                                               .itemsize = 1,
                                               .shard_dims = {0},
                                               .layout_fingerprint = "bytes",
                                               .parallel_axes = {axis}}));
  ASSERT_OK_AND_ASSIGN(auto fragment,
                       PlacementFragment::Make({.tensor_id = "v",
                                                .global_offset = {4, 0},
                                                .local_shape = {2, 4},
                                                .nbytes = 8,
                                                .rank = {.tp = 1}}));
  ASSERT_OK_AND_ASSIGN(auto part,
                       WeightPlacementPart::Make({.header = {"r", "v1", 3, "s"},
                                                  .topology_id = "sha256:t",
                                                  .participant_id = "p1",
                                                  .rank = {.tp = 1},
                                                  .tensors = {tensor},
                                                  .fragments = {fragment}}));
  const std::string text = WeightPlacementPartToJson(part);
  EXPECT_THAT(text, ::testing::HasSubstr(
                        R"("parallel_axes":[{"dim":0,"kind":"tp","ranks":2,)"
                        R"("semantics":"split"}])"));
  ASSERT_OK_AND_ASSIGN(auto back, WeightPlacementPartFromJson(text));
  EXPECT_EQ(back.tensors(), part.tensors());
  EXPECT_EQ(WeightPlacementPartToJson(back), text);
}

TEST(PlacementPartJsonTest, RefusesWhatIsNotItsRecord) {
  EXPECT_THAT(WeightPlacementPartFromJson("[1, 2]"),
              StatusIs(StatusCode::kInvalidArgument,
                       "part must be an object, got list"));
  EXPECT_THAT(WeightPlacementPartFromJson("not json"),
              StatusIs(StatusCode::kInvalidArgument,
                       ::testing::StartsWith("not JSON (invalid JSON: ")));
  EXPECT_THAT(WeightPlacementPartFromJson(Edited("{\"fragments\"",
                                                 "{\"extra\":1,"
                                                 "\"fragments\"")),
              StatusIs(StatusCode::kInvalidArgument,
                       "part has unknown field(s) extra"));
  EXPECT_THAT(
      WeightPlacementPartFromJson(
          Edited("\"record\":\"weight-placement-part\",", "")),
      StatusIs(StatusCode::kInvalidArgument, "part lacks field(s) record"));
  EXPECT_THAT(
      WeightPlacementPartFromJson(Edited("\"weight-placement-part\"", "\"x\"")),
      StatusIs(StatusCode::kInvalidArgument,
               "part.record must be 'weight-placement-part', got 'x'"));
  EXPECT_THAT(WeightPlacementPartFromJson(Edited("\"weight_generation\":1",
                                                 "\"weight_generation\":true")),
              StatusIs(StatusCode::kInvalidArgument,
                       "part.weight_generation must be an integer"));
  EXPECT_THAT(WeightPlacementPartFromJson(
                  Edited("\"itemsize\":1", "\"itemsize\":\"1\"")),
              StatusIs(StatusCode::kInvalidArgument,
                       "part.tensors[0].itemsize must be an integer"));
  EXPECT_THAT(WeightPlacementPartFromJson(
                  Edited("\"layer_id\":null", "\"layer_id\":null,\"x\":2")),
              StatusIs(StatusCode::kInvalidArgument,
                       "part.tensors[0]: tensor descriptor schema fields do "
                       "not match contract: unknown field \"x\""));
}

TEST(PlacementPartJsonTest, RefusesANonCanonicalRecord) {
  // Explicit null pipeline_stage_id reads as absent, so the text is not the
  // part's own.
  EXPECT_THAT(
      WeightPlacementPartFromJson(Edited("\"nbytes\":6,",
                                         "\"nbytes\":6,"
                                         "\"pipeline_stage_id\":null,")),
      StatusIs(StatusCode::kInvalidArgument,
               "part is not in canonical form (tensors, fragments or "
               "aliases out of order)"));
}

}  // namespace
}  // namespace reshard
