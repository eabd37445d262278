// Parameter-map fingerprints: a declaration round-trips through its JSON,
// names engine and release, and a map of another release (another name,
// shape, dtype or pieces) is refused naming the first differing parameter.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reshard/engine.h"
#include "testing/status_testing.h"
#include "util/dims_text.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

constexpr const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 16, "vocab_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 24, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"})";

EngineLayout Vllm() {
  EngineLayoutOptions o;
  o.engine = "vllm";
  o.sizes.tp = 2;
  auto l = MakeEngineLayout(kLlama, o);
  EXPECT_OK(l);
  return *l;
}

std::string Shape(const EngineParameter& q) {
  return internal::DimsText(q.shape);
}

// `l` as another engine release would map it: `edit` changes the
// participants, `engine` names the release.
template <typename Edit>
EngineLayout Variant(const EngineLayout& l, const std::string& engine,
                     Edit edit) {
  std::vector<EngineParticipant> ps = l.participants();
  edit(ps);
  auto out = EngineLayout::Make(engine, l.placement(), std::move(ps));
  EXPECT_OK(out);
  return *out;
}

TEST(DeclaredMapsTest, RoundTripsAndAgreesWithItself) {
  const EngineLayout l = Vllm();
  ASSERT_OK_AND_ASSIGN(auto d, DeclareParameterMaps(l));
  EXPECT_EQ(d.engine, l.engine());
  ASSERT_EQ(d.participants.size(), 2u);
  EXPECT_EQ(d.participants[0].participant_id, "p-d0-p0-e0-t0");
  EXPECT_EQ(d.participants[0].parameters.size(),
            l.participants()[0].parameters.size());
  EXPECT_EQ(d.participants[0].parameters[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(d.participants[0].parameters[0].shape, (Dims{32, 16}));
  EXPECT_EQ(d.participants[0].parameter_map_id.substr(0, 7), "sha256:");
  // The two ranks hold other pieces: other ids.
  EXPECT_NE(d.participants[0].parameter_map_id,
            d.participants[1].parameter_map_id);
  const std::string json = DeclaredParameterMapsToJson(d);
  ASSERT_OK_AND_ASSIGN(auto back, DeclaredParameterMapsFromJson(json));
  EXPECT_EQ(DeclaredParameterMapsToJson(back), json);
  EXPECT_OK(CheckDeclaredParameterMaps(l, back, "the target"));
}

TEST(DeclaredMapsTest, DeclaresTheNamedParticipantsOnly) {
  const EngineLayout l = Vllm();
  ASSERT_OK_AND_ASSIGN(auto d, DeclareParameterMaps(l, {"p-d0-p0-e0-t1"}));
  ASSERT_EQ(d.participants.size(), 1u);
  EXPECT_EQ(d.participants[0].participant_id, "p-d0-p0-e0-t1");
  EXPECT_OK(CheckDeclaredParameterMaps(l, d, "rank 1"));
  EXPECT_THAT(DeclareParameterMaps(l, {"p-d9"}).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "cannot declare the parameter map of p-d9: the " +
                           l.engine() + " layout has no such participant"));
}

TEST(DeclaredMapsTest, ARenamedParameterIsNamed) {
  const EngineLayout l = Vllm();
  const EngineLayout renamed =
      Variant(l, "vllm@9.99", [](std::vector<EngineParticipant>& ps) {
        for (auto& p : ps) {
          p.parameters[2].name = "model.layers.0.self_attn.qkv.weight";
        }
      });
  ASSERT_OK_AND_ASSIGN(auto d, DeclareParameterMaps(renamed));
  const auto& got = d.participants[0];
  ASSERT_OK_AND_ASSIGN(auto want, DeclareParameterMaps(l, {"p-d0-p0-e0-t0"}));
  const auto& q = l.participants()[0].parameters[2];
  EXPECT_THAT(
      CheckDeclaredParameterMaps(l, d, "the target"),
      StatusIs(StatusCode::kFailedPrecondition,
               "parameter map mismatch for participant p-d0-p0-e0-t0: this "
               "side built " +
                   l.engine() + " (parameter map " +
                   want.participants[0].parameter_map_id +
                   "), the target declares vllm@9.99 (parameter map " +
                   got.parameter_map_id +
                   "); first difference at parameter 2: this side's map has " +
                   q.name + " " + Shape(q) +
                   " bfloat16, the declared has "
                   "model.layers.0.self_attn.qkv.weight " +
                   Shape(q) + " bfloat16"));
}

TEST(DeclaredMapsTest, TheEngineReleaseAloneChangesTheId) {
  const EngineLayout l = Vllm();
  const EngineLayout other =
      Variant(l, "vllm@<0.1", [](std::vector<EngineParticipant>&) {});
  ASSERT_OK_AND_ASSIGN(auto d, DeclareParameterMaps(other));
  EXPECT_THAT(CheckDeclaredParameterMaps(l, d, "the target"),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("the target declares vllm@<0.1 (parameter "
                                 "map sha256:")));
  EXPECT_THAT(CheckDeclaredParameterMaps(l, d, "the target"),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("; first difference at every parameter "
                                 "agrees, the engine does not")));
}

TEST(DeclaredMapsTest, OtherPiecesAndMissingParametersAreNamed) {
  const EngineLayout l = Vllm();
  // Two parameters of one participant swapped in order.
  const EngineLayout swapped =
      Variant(l, l.engine(), [](std::vector<EngineParticipant>& ps) {
        std::swap(ps[1].parameters[0], ps[1].parameters[1]);
      });
  ASSERT_OK_AND_ASSIGN(auto d, DeclareParameterMaps(swapped));
  const auto& p = l.participants()[1];
  EXPECT_THAT(CheckDeclaredParameterMaps(l, d, "rank 3"),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("for participant p-d0-p0-e0-t1: ")));
  EXPECT_THAT(
      CheckDeclaredParameterMaps(l, d, "rank 3"),
      StatusIs(StatusCode::kFailedPrecondition,
               HasSubstr("first difference at parameter 0: this side's map "
                         "has " +
                         p.parameters[0].name + " ")));
  // The declared map ends early.
  ASSERT_OK_AND_ASSIGN(auto full, DeclareParameterMaps(l));
  DeclaredParameterMaps shorter = full;
  auto& params = shorter.participants[0].parameters;
  const DeclaredParameter last = params.back();
  params.pop_back();
  const std::string json = DeclaredParameterMapsToJson(shorter);
  // Its id no longer hashes its parameters: refused as a document.
  EXPECT_THAT(DeclaredParameterMapsFromJson(json).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("is not the hash of its parameters")));
  shorter.participants[0].parameter_map_id =
      DeclaredParameterMapId(shorter.engine, shorter.participants[0]);
  EXPECT_THAT(CheckDeclaredParameterMaps(l, shorter, "the target"),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("first difference at parameter " +
                                 std::to_string(params.size()) +
                                 ": this side's map has " + last.name + " ")));
}

TEST(DeclaredMapsTest, UnknownParticipantsAndGarbageAreRefused) {
  const EngineLayout l = Vllm();
  ASSERT_OK_AND_ASSIGN(auto d, DeclareParameterMaps(l));
  DeclaredParameterMaps other = d;
  other.participants[0].participant_id = "p-d1-p0-e0-t0";
  EXPECT_THAT(CheckDeclaredParameterMaps(l, other, "the target"),
              StatusIs(StatusCode::kFailedPrecondition,
                       "the target declares the parameter map of participant "
                       "p-d1-p0-e0-t0, which this side's " +
                           l.engine() + " layout does not have"));
  for (const char* bad :
       {"", "[]", R"({"engine":"vllm"})",
        R"({"engine":"vllm","participants":[],"extra":1})",
        R"({"engine":"vllm","participants":[{"participant_id":"a"}]})"}) {
    EXPECT_FALSE(DeclaredParameterMapsFromJson(bad).ok()) << bad;
  }
  // One participant twice.
  DeclaredParameterMaps twice = d;
  twice.participants.push_back(d.participants[0]);
  EXPECT_THAT(
      DeclaredParameterMapsFromJson(DeclaredParameterMapsToJson(twice))
          .status(),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("participant p-d0-p0-e0-t0 is declared twice")));
}

}  // namespace
}  // namespace reshard
