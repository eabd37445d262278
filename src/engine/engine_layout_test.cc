// EngineLayout: parameter maps checked against their placement, bound by
// name, their JSON; the presets' refusals; a Megatron -> vLLM reshard in
// this process checked byte by byte.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reshard/engine.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

// One participant "p-d0-p0-e0-t0" holding tensor "w" [4, 2] uint8 as two
// fragments of two rows each (ids f0, f1).
struct Tiny {
  WeightPlacementManifest placement;
  std::string f0, f1;
};

Result<Tiny> MakeTiny() {
  testing::PlacementDraft d = testing::GridDraft({1, 1, 1, 1});
  d.tensors.push_back({.tensor_id = "w",
                       .global_shape = {4, 2},
                       .dtype = "uint8",
                       .itemsize = 1,
                       .layout_fingerprint = "uint8:row-major"});
  for (int64_t r : {0, 2}) {
    d.fragments.push_back({.tensor_id = "w",
                           .global_offset = {r, 0},
                           .local_shape = {2, 2},
                           .nbytes = 4});
  }
  RESHARD_ASSIGN_OR_RETURN(auto m, d.Build());
  Tiny t{m, "", ""};
  for (const PlacementFragment* f : m.fragments()) {
    (f->global_offset()[0] == 0 ? t.f0 : t.f1) = f->placement_fragment_id();
  }
  return t;
}

std::string MakeError(const Tiny& t, std::vector<ParameterPiece> pieces,
                      Dims shape = {10}, std::string dtype = "uint8") {
  EngineParticipant p{"p-d0-p0-e0-t0",
                      {{"fused", std::move(shape), std::move(dtype),
                        dtype == "uint8" ? 1 : 2, std::move(pieces)}}};
  p.parameters[0].itemsize = p.parameters[0].dtype == "uint8" ? 1 : 2;
  auto l = EngineLayout::Make("test", t.placement, {p});
  return l.ok() ? "OK" : l.status().message();
}

TEST(EngineLayoutTest, PiecesMustTileEachParameter) {
  ASSERT_OK_AND_ASSIGN(const Tiny t, MakeTiny());
  const std::string where =
      "parameter fused of participant "
      "p-d0-p0-e0-t0: ";
  EXPECT_EQ(MakeError(t, {{0, 4, t.f0}, {4, 2, ""}, {6, 4, t.f1}}), "OK");
  EXPECT_EQ(MakeError(t, {{0, 4, t.f0}, {6, 4, t.f1}}),
            where +
                "a gap at bytes [4, 6) (pieces must tile the parameter "
                "in order)");
  EXPECT_EQ(MakeError(t, {{0, 4, t.f0}, {2, 4, t.f1}, {6, 4, ""}}),
            where +
                "an overlap at bytes [2, 4) (pieces must tile the "
                "parameter in order)");
  EXPECT_EQ(MakeError(t, {{0, 4, t.f0}, {4, 4, t.f1}}),
            where +
                "a gap at bytes [8, 10) (the pieces end before the "
                "[10] uint8 parameter)");
  EXPECT_EQ(MakeError(t, {{0, 4, t.f0}, {4, 4, t.f1}, {8, 4, ""}}),
            where +
                "the piece at byte 8 of 4 bytes runs past its end (10 "
                "bytes)");
  EXPECT_EQ(MakeError(t, {{0, 4, t.f0}, {4, 4, t.f0}, {8, 2, ""}}),
            where + "fragment " + t.f0 + " of w is in two pieces");
  EXPECT_EQ(MakeError(t, {{0, 4, t.f0}, {4, 6, ""}}),
            "participant p-d0-p0-e0-t0 holds fragment " + t.f1 +
                " of w [2, 0]+[2, 2] in no parameter");
  EXPECT_EQ(MakeError(t, {{0, 4, "nope"}, {4, 6, ""}}),
            where + "fragment nope is not a fragment of this participant");
  EXPECT_EQ(
      MakeError(t, {{0, 4, t.f0}, {4, 4, t.f1}, {8, 8, ""}}, {8}, "bfloat16"),
      where + "fragment " + t.f0 +
          " of w holds 4 bytes of uint8, but the piece at byte 0 is 4 "
          "bytes of a bfloat16 parameter");
  EXPECT_EQ(MakeError(t, {}, {-1}), where +
                                        "shape [-1] is negative or larger "
                                        "than 2^62 bytes");
  EXPECT_EQ(MakeError(t, {}, {0, (int64_t{1} << 62) + 1}),
            where +
                "shape [0, 4611686018427387905] is negative or larger "
                "than 2^62 bytes");
  // A zero-size parameter has no pieces; one with a piece is refused.
  EXPECT_EQ(MakeError(t, {{0, 4, ""}}, {0, 4}),
            where +
                "the piece at byte 0 of 4 bytes runs past its end (0 "
                "bytes)");
}

// Finding (issue 58): pieces at byte offsets that split elements were
// accepted (a 3-byte padding piece put the next bfloat16 fragment at byte
// 11). Every piece's offset and size must be a multiple of the itemsize,
// through EngineLayout::Make and the JSON maps alike.
TEST(EngineLayoutTest, PiecesSplittingElementsAreRefused) {
  testing::PlacementDraft d = testing::GridDraft({1, 1, 1, 1});
  d.tensors.push_back({.tensor_id = "w",
                       .global_shape = {4, 2},
                       .dtype = "bfloat16",
                       .itemsize = 2,
                       .layout_fingerprint = "bfloat16:row-major"});
  for (int64_t r : {0, 2}) {
    d.fragments.push_back({.tensor_id = "w",
                           .global_offset = {r, 0},
                           .local_shape = {2, 2},
                           .nbytes = 8});
  }
  ASSERT_OK_AND_ASSIGN(auto placement, d.Build());
  std::string f0, f1;
  for (const PlacementFragment* f : placement.fragments()) {
    (f->global_offset()[0] == 0 ? f0 : f1) = f->placement_fragment_id();
  }
  const auto make = [&](std::vector<ParameterPiece> pieces) {
    EngineParticipant p{"p-d0-p0-e0-t0",
                        {{"fused", {10}, "bfloat16", 2, std::move(pieces)}}};
    return EngineLayout::Make("test", placement, {p});
  };
  ASSERT_OK_AND_ASSIGN(
      auto whole, make({{0, 8, f0}, {8, 2, ""}, {10, 8, f1}, {18, 2, ""}}));
  EXPECT_THAT(make({{0, 8, f0}, {8, 3, ""}, {11, 8, f1}, {19, 1, ""}}).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "parameter fused of participant p-d0-p0-e0-t0: piece 1 "
                       "(padding, 3 bytes at byte 8) splits bfloat16 "
                       "elements: piece offsets and sizes must be multiples "
                       "of its 2-byte itemsize"));
  EXPECT_THAT(make({{0, 3, ""}, {3, 8, f0}, {11, 8, f1}, {19, 1, ""}}).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "parameter fused of participant p-d0-p0-e0-t0: piece 0 "
                       "(padding, 3 bytes at byte 0) splits bfloat16 "
                       "elements: piece offsets and sizes must be multiples "
                       "of its 2-byte itemsize"));
  // The same map as JSON, its padding moved by one byte.
  std::string json = EngineParametersToJson(whole);
  for (auto [from, to] :
       {std::pair<std::string, std::string>{
            R"({"fragment":null,"nbytes":2,"offset":8})",
            R"({"fragment":null,"nbytes":3,"offset":8})"},
        {R"("nbytes":8,"offset":10})", R"("nbytes":8,"offset":11})"},
        {R"({"fragment":null,"nbytes":2,"offset":18})",
         R"({"fragment":null,"nbytes":1,"offset":19})"}}) {
    const size_t at = json.find(from);
    ASSERT_NE(at, std::string::npos) << from << " in " << json;
    json.replace(at, from.size(), to);
  }
  EXPECT_THAT(EngineParametersFromJson(json, placement).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       ::testing::HasSubstr(
                           "parameter fused of participant p-d0-p0-e0-t0: "
                           "piece 1 (padding, 3 bytes at byte 8) splits "
                           "bfloat16 elements: piece offsets and sizes must "
                           "be multiples of its 2-byte itemsize")));
}

TEST(EngineLayoutTest, EveryParticipantHasOneMap) {
  ASSERT_OK_AND_ASSIGN(const Tiny t, MakeTiny());
  EXPECT_THAT(EngineLayout::Make("test", t.placement, {}).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "participant p-d0-p0-e0-t0 has no parameter map"));
  EngineParticipant ghost{"ghost", {}};
  EXPECT_THAT(EngineLayout::Make("test", t.placement, {ghost}).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "parameter map of unknown participant ghost"));
}

TEST(EngineLayoutTest, BindsByNameZeroesPaddingAndRoundTripsItsJson) {
  ASSERT_OK_AND_ASSIGN(const Tiny t, MakeTiny());
  EngineParticipant p{"p-d0-p0-e0-t0",
                      {{"a", {2, 2}, "uint8", 1, {{0, 4, t.f1}}},
                       {"b", {4, 2}, "uint8", 1, {{0, 4, t.f0}, {4, 4, ""}}}}};
  ASSERT_OK_AND_ASSIGN(auto layout,
                       EngineLayout::Make("test", t.placement, {p}));
  std::vector<uint8_t> a(4, 0xAA), b(8, 0xBB);
  ParameterBuffers buffers{{"a", {a.data(), 4}}, {"b", {b.data(), 8}}};
  ASSERT_OK_AND_ASSIGN(auto fragments, ParameterFragmentBuffers(
                                           layout, p.participant_id, buffers));
  EXPECT_EQ(fragments.at(t.f1), a.data());
  EXPECT_EQ(fragments.at(t.f0), b.data());
  ASSERT_OK_AND_ASSIGN(auto binding,
                       BindParameters(layout, p.participant_id, buffers));
  EXPECT_EQ(binding.fragments().size(), 2u);
  ASSERT_OK(ZeroParameterPadding(layout, p.participant_id, buffers));
  EXPECT_EQ(b, (std::vector<uint8_t>{0xBB, 0xBB, 0xBB, 0xBB, 0, 0, 0, 0}));
  EXPECT_EQ(a, std::vector<uint8_t>(4, 0xAA));

  ParameterBuffers short_b{{"a", {a.data(), 4}}, {"b", {b.data(), 7}}};
  EXPECT_THAT(BindParameters(layout, p.participant_id, short_b).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "parameter b of participant p-d0-p0-e0-t0: the buffer "
                       "holds 7 bytes, the [4, 2] uint8 parameter 8"));
  ParameterBuffers extra = buffers;
  extra["c"] = {a.data(), 4};
  EXPECT_THAT(BindParameters(layout, p.participant_id, extra).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "participant p-d0-p0-e0-t0 has no parameter c "
                       "(a buffer was given)"));
  EXPECT_THAT(BindParameters(layout, "x", buffers).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "engine layout test has no participant x"));

  const std::string json = EngineParametersToJson(layout);
  EXPECT_THAT(json, HasSubstr(R"({"fragment":null,"nbytes":4,"offset":4})"));
  ASSERT_OK_AND_ASSIGN(auto back, EngineParametersFromJson(json, t.placement));
  EXPECT_EQ(back.participants()[0].parameters, p.parameters);
  EXPECT_EQ(EngineParametersToJson(back), json);
}

// A fill piece (vLLM's KV-cache scales: 0-dim, -1.0 in the model dtype)
// tiles like padding and holds one element repeated: checked by Make,
// written by ZeroParameterPadding and ParameterMemory::Allocate, carried
// by the JSON (strictly) and by the parameter-map ids.
TEST(EngineLayoutTest, FillPiecesHoldTheirElementEverywherePaddingIsWritten) {
  ASSERT_OK_AND_ASSIGN(const Tiny t, MakeTiny());
  const std::string minus_one("\x80\xbf", 2);  // bfloat16 -1.0
  auto make = [&](std::string fill) {
    return EngineParticipant{
        "p-d0-p0-e0-t0",
        {{"w", {4, 2}, "uint8", 1, {{0, 4, t.f0}, {4, 4, t.f1}}},
         {"attn.q_scale", {}, "bfloat16", 2, {{0, 2, "", fill}}},
         {"pad", {3}, "bfloat16", 2, {{0, 6, "", fill}}},
         {"zeros", {2}, "bfloat16", 2, {{0, 4, ""}}},
         {"none", {0, 3}, "bfloat16", 2, {}}}};
  };
  const EngineParticipant p = make(minus_one);
  ASSERT_OK_AND_ASSIGN(auto layout,
                       EngineLayout::Make("test", t.placement, {p}));
  std::vector<uint8_t> w(8, 0xAA), q(2, 0x11), pad(6, 0x22), zeros(4, 0x33);
  ParameterBuffers buffers{{"w", {w.data(), 8}},
                           {"attn.q_scale", {q.data(), 2}},
                           {"pad", {pad.data(), 6}},
                           {"zeros", {zeros.data(), 4}},
                           {"none", {nullptr, 0}}};
  ASSERT_OK_AND_ASSIGN(auto binding,
                       BindParameters(layout, p.participant_id, buffers));
  EXPECT_EQ(binding.fragments().size(), 2u);  // a fill is never moved
  ASSERT_OK(ZeroParameterPadding(layout, p.participant_id, buffers));
  EXPECT_EQ(q, (std::vector<uint8_t>{0x80, 0xBF}));
  EXPECT_EQ(pad, (std::vector<uint8_t>{0x80, 0xBF, 0x80, 0xBF, 0x80, 0xBF}));
  EXPECT_EQ(zeros, std::vector<uint8_t>(4, 0));
  EXPECT_EQ(w, std::vector<uint8_t>(8, 0xAA));

  ASSERT_OK_AND_ASSIGN(auto memory, ParameterMemory::Allocate(p));
  auto bytes = [&](const char* name) {
    const ParameterBuffer& b = memory.buffers().at(name);
    const auto* d = static_cast<const uint8_t*>(b.data);
    return std::vector<uint8_t>(d, d + b.nbytes);
  };
  EXPECT_EQ(bytes("attn.q_scale"), (std::vector<uint8_t>{0x80, 0xBF}));
  EXPECT_EQ(bytes("pad"),
            (std::vector<uint8_t>{0x80, 0xBF, 0x80, 0xBF, 0x80, 0xBF}));
  EXPECT_EQ(bytes("zeros"), std::vector<uint8_t>(4, 0));

  // The JSON carries the fill as the lowercase hex of its bytes, only on
  // fill pieces; it reads back to the same maps.
  const std::string json = EngineParametersToJson(layout);
  EXPECT_THAT(json, HasSubstr(R"({"fill":"80bf","fragment":null,"nbytes":2,)"
                              R"("offset":0})"));
  EXPECT_THAT(json, HasSubstr(R"({"fragment":null,"nbytes":4,"offset":0})"));
  ASSERT_OK_AND_ASSIGN(auto back, EngineParametersFromJson(json, t.placement));
  EXPECT_EQ(back.participants()[0].parameters, p.parameters);
  EXPECT_EQ(EngineParametersToJson(back), json);

  // Two fills are two maps: the map id and the declared pieces differ.
  ASSERT_OK_AND_ASSIGN(auto other,
                       EngineLayout::Make("test", t.placement,
                                          {make(std::string("\x00\x3c", 2))}));
  EXPECT_NE(EngineParameterMapId(other), EngineParameterMapId(layout));
  const DeclaredParticipantMap a =
      DeclareParticipantMap(layout, layout.participants()[0]);
  const DeclaredParticipantMap b =
      DeclareParticipantMap(other, other.participants()[0]);
  EXPECT_NE(a.parameters[1].pieces_id, b.parameters[1].pieces_id);
  EXPECT_EQ(a.parameters[3].pieces_id, b.parameters[3].pieces_id);
  ASSERT_OK_AND_ASSIGN(auto declared, DeclareParameterMaps(other));
  EXPECT_THAT(CheckDeclaredParameterMaps(layout, declared, "the target"),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("parameter 1: attn.q_scale is filled from "
                                 "other bytes")));
  // Padding without a fill hashes as it did before fills existed.
  ASSERT_OK_AND_ASSIGN(auto plain,
                       EngineLayout::Make("test", t.placement, {make("")}));
  EXPECT_THAT(EngineParametersToJson(plain), ::testing::Not(HasSubstr("fill")));
}

TEST(EngineLayoutTest, FillsOfTheWrongSizeOrOnFragmentsAreRefused) {
  ASSERT_OK_AND_ASSIGN(const Tiny t, MakeTiny());
  auto error = [&](std::vector<ParameterPiece> scale_pieces, Dims shape = {}) {
    EngineParticipant p{
        "p-d0-p0-e0-t0",
        {{"w", {4, 2}, "uint8", 1, {{0, 4, t.f0}, {4, 4, t.f1}}},
         {"attn.k_scale", std::move(shape), "float32", 4,
          std::move(scale_pieces)}}};
    auto l = EngineLayout::Make("test", t.placement, {p});
    return l.ok() ? "OK" : l.status().message();
  };
  const std::string where =
      "parameter attn.k_scale of participant p-d0-p0-e0-t0: ";
  EXPECT_EQ(error({{0, 4, "", std::string("\0\0\x80\xbf", 4)}}), "OK");
  EXPECT_EQ(error({{0, 4, "", std::string("\x80\xbf", 2)}}),
            where +
                "the fill of piece 0 (4 bytes at byte 0) is 2 bytes, not "
                "one 4-byte float32 element");
  EXPECT_EQ(error({{0, 8, "", std::string(8, '\1')}}, {2}),
            where +
                "the fill of piece 0 (8 bytes at byte 0) is 8 bytes, not "
                "one 4-byte float32 element");
  {
    EngineParticipant p{"p-d0-p0-e0-t0",
                        {{"w",
                          {4, 2},
                          "uint8",
                          1,
                          {{0, 4, t.f0, std::string(1, '\1')}, {4, 4, t.f1}}}}};
    auto l = EngineLayout::Make("test", t.placement, {p});
    EXPECT_THAT(l.status(),
                StatusIs(StatusCode::kInvalidArgument,
                         "parameter w of participant p-d0-p0-e0-t0: piece 0 "
                         "has both fragment " +
                             t.f0 + " and a fill (a fill is padding's)"));
  }
  // The JSON reader is as strict: lowercase hex of whole bytes, then Make.
  EngineParticipant ok{
      "p-d0-p0-e0-t0",
      {{"w", {4, 2}, "uint8", 1, {{0, 4, t.f0}, {4, 4, t.f1}}},
       {"s", {}, "float32", 4, {{0, 4, "", std::string("\0\0\x80\xbf", 4)}}}}};
  ASSERT_OK_AND_ASSIGN(auto layout,
                       EngineLayout::Make("test", t.placement, {ok}));
  const std::string json = EngineParametersToJson(layout);
  ASSERT_THAT(json, HasSubstr(R"("fill":"000080bf")"));
  auto with = [&](const std::string& fill) {
    std::string j = json;
    j.replace(j.find("000080bf"), 8, fill);
    auto l = EngineParametersFromJson(j, t.placement);
    return l.ok() ? "OK" : l.status().message();
  };
  EXPECT_EQ(with("000080bf"), "OK");
  EXPECT_THAT(with("000080BF"), HasSubstr("is not the lowercase hex"));
  EXPECT_THAT(with("000080b"), HasSubstr("is not the lowercase hex"));
  EXPECT_THAT(with(""), HasSubstr("is not the lowercase hex"));
  EXPECT_THAT(with("80bf"),
              HasSubstr("the fill of piece 0 (4 bytes at byte 0) is 2 bytes, "
                        "not one 4-byte float32 element"));
}

// ---------------------------------------------------------------------------
// Presets.

constexpr const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 16, "vocab_size": 54, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 24, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"})";

EngineLayoutOptions Engine(std::string name, int64_t tp, int64_t pp = 1,
                           int64_t ep = 1, int64_t dp = 1) {
  EngineLayoutOptions o;
  o.engine = std::move(name);
  o.sizes = {tp, pp, ep, dp};
  o.make_vocab_size_divisible_by = 4;
  return o;
}

std::map<std::string, Dims> Shapes(const EngineLayout& l, const char* id) {
  std::map<std::string, Dims> out;
  for (const EngineParameter& q : l.FindParticipant(id)->parameters) {
    out[q.name] = q.shape;
  }
  return out;
}

TEST(EnginePresetTest, VllmReplicatesKvHeadsAcrossGroupsOfRanks) {
  ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kLlama, Engine("vllm", 4)));
  const auto s = Shapes(l, "p-d0-p0-e0-t3");
  // 1 query head (4 rows) + k and v of KV head 1 (4 rows each).
  EXPECT_EQ(s.at("model.layers.0.self_attn.qkv_proj.weight"), (Dims{12, 16}));
  EXPECT_EQ(s.at("model.layers.0.self_attn.o_proj.weight"), (Dims{16, 4}));
  EXPECT_EQ(s.at("model.layers.0.mlp.gate_up_proj.weight"), (Dims{12, 16}));
  // 54 rows padded to 64, 16 per rank: rank 3 holds rows [48, 54) and ten
  // rows of padding.
  const EngineParticipant* p3 = l.FindParticipant("p-d0-p0-e0-t3");
  ASSERT_NE(p3, nullptr);
  for (const EngineParameter& q : p3->parameters) {
    if (q.name != "model.embed_tokens.weight") continue;
    ASSERT_EQ(q.pieces.size(), 2u);
    EXPECT_EQ(q.pieces[0].nbytes, 6u * 16 * 2);
    EXPECT_TRUE(q.pieces[1].padding());
    EXPECT_EQ(q.pieces[1].nbytes, 10u * 16 * 2);
  }
  const TensorDescriptor* k =
      l.placement().FindTensor("model.layers.0.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->FindAxis(AxisKind::kTp)->shards(), 2);
}

TEST(EnginePresetTest, RefusalsNameTheParameterOrTensor) {
  EXPECT_THAT(MakeEngineLayout(kLlama, Engine("megatron", 4)).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "megatron refuses TP 4: num_key_value_heads (query "
                       "groups) = 2 is not divisible by 4"));
  EXPECT_THAT(MakeEngineLayout(kLlama, Engine("vllm", 2, 1, 3)).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("--ep must be 1 or 2, not 3")));
  EXPECT_THAT(MakeEngineLayout(kLlama, Engine("trtllm", 2)).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "engine trtllm: unknown engine (supported: hf, "
                       "megatron, sglang, vllm@0.33 (= vllm), vllm@<0.33, "
                       "vllm@<0.10.2)"));
  EngineLayoutOptions wide = Engine("megatron", 2);
  wide.make_vocab_size_divisible_by = 128;
  EXPECT_THAT(MakeEngineLayout(kLlama, wide).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "megatron cannot split the vocabulary of "
                       "model.embed_tokens.weight over TP 2: 54 rows padded "
                       "to 256 (a multiple of --make-vocab-size-divisible-by "
                       "128 x TP; a smaller multiple avoids it) give each "
                       "rank 128 rows and rank 1 only padding"));
}

// NAME, NAME@RELEASE and NAME@<RELEASE resolve against the presets'
// release tables; the layout's engine() is the range's canonical spec.
TEST(EnginePresetTest, EngineSpecsNameTheReleaseRange) {
  const std::pair<const char*, const char*> cases[] = {
      {"vllm", "vllm@0.33"},
      {"vllm@0.33", "vllm@0.33"},
      {"vllm@0.33.2", "vllm@0.33"},
      {"vllm@0.33.0", "vllm@0.33"},
      {"vllm@<0.33", "vllm@<0.33"},
      {"vllm@0.32", "vllm@<0.33"},
      {"vllm@0.10.2", "vllm@<0.33"},
      {"vllm@0.10.1", "vllm@<0.10.2"},
      {"vllm@<0.10.2", "vllm@<0.10.2"},
      {"sglang", "sglang"},
      {"megatron", "megatron"},
      {"hf", "hf"}};
  for (const auto& [spec, canonical] : cases) {
    ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kLlama, Engine(spec, 2)));
    EXPECT_EQ(l.engine(), canonical) << spec;
    EXPECT_THAT(EngineParametersToJson(l),
                HasSubstr(std::string(R"("engine":")") + canonical + "\""));
  }
  const std::string supported =
      " (supported: hf, megatron, sglang, vllm@0.33 (= vllm), vllm@<0.33, "
      "vllm@<0.10.2)";
  const std::pair<const char*, std::string> refused[] = {
      {"vllm@0.34",
       "engine vllm@0.34: release 0.34 is newer than the newest the preset "
       "describes"},
      {"vllm@<0.20",
       "engine vllm@<0.20: not the end of a release range of the vllm preset "
       "(releases below it are laid out in more than one way)"},
      {"vllm@",
       "engine vllm@: a release is NAME@X.Y[.Z] or NAME@<X.Y[.Z] "
       "(decimal numbers)"},
      {"vllm@0.x",
       "engine vllm@0.x: a release is NAME@X.Y[.Z] or "
       "NAME@<X.Y[.Z] (decimal numbers)"},
      {"vllm@-1",
       "engine vllm@-1: a release is NAME@X.Y[.Z] or "
       "NAME@<X.Y[.Z] (decimal numbers)"},
      {"vllm@<+0.33",
       "engine vllm@<+0.33: a release is NAME@X.Y[.Z] or "
       "NAME@<X.Y[.Z] (decimal numbers)"},
      {"vllm@0.33.0.1",
       "engine vllm@0.33.0.1: a release is NAME@X.Y[.Z] or "
       "NAME@<X.Y[.Z] (decimal numbers)"},
      {"megatron@0.12",
       "engine megatron@0.12: the megatron preset has one layout for every "
       "release; name it without a release"},
      {"VLLM", "engine VLLM: unknown engine"}};
  for (const auto& [spec, message] : refused) {
    EXPECT_THAT(MakeEngineLayout(kLlama, Engine(spec, 2)).status(),
                StatusIs(StatusCode::kInvalidArgument, message + supported))
        << spec;
  }
}

constexpr const char* kDeepseekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "hidden_size": 16, "vocab_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 2, "num_key_value_heads": 2,
  "intermediate_size": 32, "moe_intermediate_size": 8,
  "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
  "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1,
  "topk_group": 1, "topk_method": "noaux_tc", "q_lora_rank": null,
  "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4,
  "v_head_dim": 4, "num_nextn_predict_layers": 0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";

std::vector<std::string> Names(const EngineLayout& l, const char* id,
                               std::string_view prefix) {
  std::vector<std::string> out;
  for (const EngineParameter& q : l.FindParticipant(id)->parameters) {
    if (q.name.starts_with(prefix)) out.push_back(q.name);
  }
  return out;
}

// Each rank's parameters in vLLM's named_parameters() order (module
// registration order): self_attn (kv_a_proj_with_mqa before q_proj without
// q_lora_rank), mlp (gate, its float32 correction bias, shared experts,
// FusedMoE), then the two norms. vLLM 0.33 keeps FusedMoE's parameters in
// its routed_experts submodule; earlier releases and SGLang directly in it.
TEST(EnginePresetTest, VllmNamesAndOrdersParametersAsTheRelease) {
  ASSERT_OK_AND_ASSIGN(auto l,
                       MakeEngineLayout(kDeepseekV3, Engine("vllm", 2)));
  const std::string p = "model.layers.1.";
  EXPECT_EQ(
      Names(l, "p-d0-p0-e0-t0", p),
      (std::vector<std::string>{
          p + "self_attn.kv_a_proj_with_mqa.weight",
          p + "self_attn.q_proj.weight", p + "self_attn.kv_a_layernorm.weight",
          p + "self_attn.kv_b_proj.weight", p + "self_attn.o_proj.weight",
          p + "mlp.gate.weight", p + "mlp.gate.e_score_correction_bias",
          p + "mlp.shared_experts.gate_up_proj.weight",
          p + "mlp.shared_experts.down_proj.weight",
          p + "mlp.experts.routed_experts.w13_weight",
          p + "mlp.experts.routed_experts.w2_weight",
          p + "input_layernorm.weight",
          p + "post_attention_layernorm.weight"}));
  for (const EngineParameter& q :
       l.FindParticipant("p-d0-p0-e0-t1")->parameters) {
    if (q.name.ends_with("e_score_correction_bias")) {
      EXPECT_EQ(q.dtype, "float32");
      EXPECT_EQ(q.itemsize, 4);
    } else {
      EXPECT_EQ(q.dtype, "bfloat16") << q.name;
    }
  }
  for (const char* spec : {"vllm@<0.33", "sglang"}) {
    ASSERT_OK_AND_ASSIGN(auto old,
                         MakeEngineLayout(kDeepseekV3, Engine(spec, 2)));
    const auto names = Names(old, "p-d0-p0-e0-t0", p + "mlp.experts.");
    EXPECT_EQ(names, (std::vector<std::string>{p + "mlp.experts.w13_weight",
                                               p + "mlp.experts.w2_weight"}))
        << spec;
  }
  std::string with_q_lora = kDeepseekV3;
  with_q_lora.replace(with_q_lora.find("null"), 4, "8");
  ASSERT_OK_AND_ASSIGN(auto mcore,
                       MakeEngineLayout(with_q_lora, Engine("megatron", 1)));
  bool seen = false;
  for (const EngineParameter& q :
       mcore.FindParticipant("p-d0-p0-e0-t0")->parameters) {
    if (q.name == "decoder.layers.1.mlp.router.expert_bias") {
      EXPECT_EQ(q.dtype, "float32");
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

// A vocabulary multiple whose product with TP overflowed int64 was refused
// only by later placement checks, with messages naming no flag.
TEST(EnginePresetTest, MegatronVocabMultipleOverflowIsRefusedNamingTheFlag) {
  for (const int64_t multiple :
       {int64_t{0}, int64_t{-8}, (int64_t{1} << 30) + 1, int64_t{1} << 62,
        INT64_MAX}) {
    EngineLayoutOptions o = Engine("megatron", 2);
    o.make_vocab_size_divisible_by = multiple;
    EXPECT_THAT(MakeEngineLayout(kLlama, o).status(),
                StatusIs(StatusCode::kInvalidArgument,
                         "--make-vocab-size-divisible-by must be from 1 to "
                         "1073741824 at TP 2 (the padded vocabulary is at "
                         "most 2^31 rows), not " +
                             std::to_string(multiple)))
        << multiple;
  }
}

// ---------------------------------------------------------------------------
// Megatron TP 2 x PP 2 -> vLLM TP 4 in this process.

uint8_t PatternByte(const std::string& tensor, uint64_t element, int64_t b) {
  const uint64_t h = std::hash<std::string>()(tensor);
  return static_cast<uint8_t>((h + element * 2654435761u + b * 40503u) >> 5);
}

// Calls visit(byte address, expected byte) for every byte of `p`'s
// parameters: each fragment byte is its tensor element's pattern, padding
// zero.
void ForEachByte(const EngineLayout& l, const EngineParticipant& p,
                 const ParameterBuffers& buffers,
                 const std::function<void(uint8_t*, uint8_t)>& visit) {
  for (const EngineParameter& q : p.parameters) {
    auto* base = static_cast<uint8_t*>(buffers.at(q.name).data);
    for (const ParameterPiece& piece : q.pieces) {
      if (piece.padding()) {
        for (uint64_t i = 0; i < piece.nbytes; ++i) {
          visit(base + piece.offset + i, 0);
        }
        continue;
      }
      const PlacementFragment* f =
          l.placement().FindFragment(piece.placement_fragment_id);
      const TensorDescriptor* t = l.placement().FindTensor(f->tensor_id());
      const Dims& g = t->global_shape();
      const Dims& o = f->global_offset();
      const Dims& s = f->local_shape();
      const uint64_t elements = piece.nbytes / t->itemsize();
      for (uint64_t e = 0; e < elements; ++e) {
        uint64_t rest = e, global = 0, stride = 1;
        for (size_t d = s.size(); d-- > 0;) {
          global += (o[d] + static_cast<int64_t>(rest % s[d])) * stride;
          rest /= s[d];
          stride *= g[d];
        }
        for (int64_t b = 0; b < t->itemsize(); ++b) {
          visit(base + piece.offset + e * t->itemsize() + b,
                PatternByte(t->tensor_id(), global, b));
        }
      }
    }
  }
}

TEST(EnginePresetTest, MegatronToVllmMovesEveryByteIntoItsParameter) {
  ASSERT_OK_AND_ASSIGN(auto src,
                       MakeEngineLayout(kLlama, Engine("megatron", 2, 2)));
  ASSERT_OK_AND_ASSIGN(auto dst, MakeEngineLayout(kLlama, Engine("vllm", 4)));
  std::vector<ParameterMemory> memory;
  std::vector<WeightRuntimeBindingManifest> sb, db;
  for (auto* side : {&src, &dst}) {
    BufferBindingOptions o;
    o.instance_id = side == &src ? "trainer" : "engine";
    for (const EngineParticipant& p : side->participants()) {
      ASSERT_OK_AND_ASSIGN(auto m, ParameterMemory::Allocate(p));
      ForEachByte(*side, p, m.buffers(), [&](uint8_t* at, uint8_t want) {
        *at = side == &src ? want : 0xEE;
      });
      ASSERT_OK_AND_ASSIGN(
          auto b, BindParameters(*side, p.participant_id, m.buffers(), o));
      (side == &src ? sb : db).push_back(std::move(b));
      memory.push_back(std::move(m));
    }
  }
  ASSERT_OK_AND_ASSIGN(auto report,
                       Reshard(src.placement(), sb, dst.placement(), db));
  uint64_t checked = 0;
  for (size_t i = 0; i < dst.participants().size(); ++i) {
    const EngineParticipant& p = dst.participants()[i];
    const ParameterBuffers& buffers =
        memory[src.participants().size() + i].buffers();
    ASSERT_OK(ZeroParameterPadding(dst, p.participant_id, buffers));
    ForEachByte(dst, p, buffers, [&](uint8_t* at, uint8_t want) {
      ASSERT_EQ(*at, want) << p.participant_id;
      ++checked;
    });
  }
  EXPECT_GT(report.bytes, 0u);
  EXPECT_GT(checked, report.bytes);  // padding rows too
}

}  // namespace
}  // namespace reshard
