// The vLLM preset for Qwen3-Next and Qwen3.5's text classes
// (vllm_hybrid_preset.cc): every parameter of both ranks of a tiny
// Qwen3-Next at TP 2 with its exact pieces, Qwen3.5's separate in_proj
// tensors, pipeline stages, sequence-parallel MoE, the release naming,
// and the refusals with their messages. The expected maps follow vLLM
// 0.33's qwen3_next.py, qwen3_5.py and qwen_gdn_linear_attn.py;
// tests/cli/engine_hybrid_cli_test.py checks the loaded bytes, the fused
// experts of a checkpoint and their refusal at an EP other than 1 or TP.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reshard/engine.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

std::string Replace(std::string s, const std::string& from,
                    const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

EngineLayoutOptions Grid(int64_t tp, int64_t pp = 1, int64_t ep = 1,
                         int64_t dp = 1, std::string engine = "vllm") {
  EngineLayoutOptions o;
  o.engine = std::move(engine);
  o.sizes = {tp, pp, ep, dp};
  return o;
}

std::string Text(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    s += (i > 0 ? ", " : "") + std::to_string(d[i]);
  }
  return s + "]";
}

// "model.layers." dropped, for short expectations.
std::string Short(std::string name) {
  constexpr std::string_view kLayers = "model.layers.";
  if (name.starts_with(kLayers)) name.erase(0, kLayers.size());
  return name;
}

// One line per parameter of `participant` whose name contains `filter`:
// "name [shape] dtype: tensor [offset] [shape], ..., pad N".
std::vector<std::string> Params(const EngineLayout& l,
                                const std::string& participant,
                                const std::string& filter = "") {
  std::vector<std::string> out;
  const EngineParticipant* p = l.FindParticipant(participant);
  EXPECT_NE(p, nullptr) << participant;
  if (p == nullptr) return out;
  for (const EngineParameter& q : p->parameters) {
    if (q.name.find(filter) == std::string::npos) continue;
    std::string s = Short(q.name) + " " + Text(q.shape) + " " + q.dtype + ":";
    for (size_t i = 0; i < q.pieces.size(); ++i) {
      const ParameterPiece& piece = q.pieces[i];
      s += i > 0 ? ", " : " ";
      if (piece.padding()) {
        s += "pad " + std::to_string(piece.nbytes);
        continue;
      }
      const PlacementFragment* f =
          l.placement().FindFragment(piece.placement_fragment_id);
      s += Short(f->tensor_id()) + " " + Text(f->global_offset()) + " " +
           Text(f->local_shape());
    }
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> Names(const EngineLayout& l,
                               const std::string& participant) {
  std::vector<std::string> out;
  for (const EngineParameter& q : l.FindParticipant(participant)->parameters) {
    out.push_back(Short(q.name));
  }
  return out;
}

// Layer 0 gated DeltaNet, layer 1 gated full attention, both sparse; two
// experts; k = 2 heads x 4, v = 4 heads x 4; 100 tokens (128 padded).
constexpr const char* kNext = R"({
  "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
  "hidden_size": 16, "vocab_size": 100, "num_hidden_layers": 2,
  "layer_types": ["linear_attention", "full_attention"],
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4,
  "intermediate_size": 32, "moe_intermediate_size": 8,
  "shared_expert_intermediate_size": 8, "num_experts": 2,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4,
  "linear_key_head_dim": 4, "linear_value_head_dim": 4,
  "linear_conv_kernel_dim": 4, "num_nextn_predict_layers": 1,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";

// The MoE block of both layers of kNext, rank t of TP 2.
std::vector<std::string> NextMoe(int layer, int t) {
  const std::string m = std::to_string(layer) + ".mlp.";
  const std::string r = std::to_string(4 * t);
  const std::string c = "[0, " + r + "]";
  std::vector<std::string> out = {
      m + "gate.weight [2, 16] bfloat16: " + m + "gate.weight [0, 0] [2, 16]",
      m + "shared_expert_gate.weight [1, 16] bfloat16: " + m +
          "shared_expert_gate.weight [0, 0] [1, 16]",
      m + "shared_expert.gate_up_proj.weight [8, 16] bfloat16: " + m +
          "shared_expert.gate_proj.weight [" + r + ", 0] [4, 16], " + m +
          "shared_expert.up_proj.weight [" + r + ", 0] [4, 16]",
      m + "shared_expert.down_proj.weight [16, 4] bfloat16: " + m +
          "shared_expert.down_proj.weight " + c + " [16, 4]",
      m + "experts.routed_experts.w13_weight [2, 8, 16] bfloat16: " + m +
          "experts.0.gate_proj.weight [" + r + ", 0] [4, 16], " + m +
          "experts.0.up_proj.weight [" + r + ", 0] [4, 16], " + m +
          "experts.1.gate_proj.weight [" + r + ", 0] [4, 16], " + m +
          "experts.1.up_proj.weight [" + r + ", 0] [4, 16]",
      m + "experts.routed_experts.w2_weight [2, 16, 4] bfloat16: " + m +
          "experts.0.down_proj.weight " + c + " [16, 4], " + m +
          "experts.1.down_proj.weight " + c + " [16, 4]"};
  for (const char* norm :
       {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
    const std::string n = std::to_string(layer) + "." + norm;
    out.push_back(n + " [16] bfloat16: " + n + " [0] [16]");
  }
  return out;
}

std::vector<std::string> Concat(std::vector<std::vector<std::string>> parts) {
  std::vector<std::string> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(VllmHybridPresetTest, Qwen3NextAtTp2EveryParameterAndPiece) {
  ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kNext, Grid(2)));
  EXPECT_EQ(l.engine(), "vllm@0.33");
  const std::vector<std::string> rank0 = Concat(
      {{"model.embed_tokens.weight [64, 16] bfloat16: "
        "model.embed_tokens.weight [0, 0] [64, 16]",
        // The DeltaNet's own parameters, then its submodules'.
        "0.linear_attn.dt_bias [2] bfloat16: 0.linear_attn.dt_bias [0] [2]",
        "0.linear_attn.A_log [2] float32: 0.linear_attn.A_log [0] [2]",
        // conv1d: this rank's share of each of q, k and v.
        "0.linear_attn.conv1d.weight [16, 1, 4] bfloat16: "
        "0.linear_attn.conv1d.weight [0, 0, 0] [4, 1, 4], "
        "0.linear_attn.conv1d.weight [8, 0, 0] [4, 1, 4], "
        "0.linear_attn.conv1d.weight [16, 0, 0] [8, 1, 4]",
        // Qwen3-Next's fused projections: contiguous whole key-head groups.
        "0.linear_attn.in_proj_qkvz.weight [24, 16] bfloat16: "
        "0.linear_attn.in_proj_qkvz.weight [0, 0] [24, 16]",
        "0.linear_attn.in_proj_ba.weight [4, 16] bfloat16: "
        "0.linear_attn.in_proj_ba.weight [0, 0] [4, 16]",
        "0.linear_attn.norm.weight [4] bfloat16: "
        "0.linear_attn.norm.weight [0] [4]",
        "0.linear_attn.out_proj.weight [16, 8] bfloat16: "
        "0.linear_attn.out_proj.weight [0, 0] [16, 8]"},
       NextMoe(0, 0),
       // q rows: two heads of 4 queries and 4 gate rows each.
       {"1.self_attn.qkv_proj.weight [24, 16] bfloat16: "
        "1.self_attn.q_proj.weight [0, 0] [16, 16], "
        "1.self_attn.k_proj.weight [0, 0] [4, 16], "
        "1.self_attn.v_proj.weight [0, 0] [4, 16]",
        "1.self_attn.o_proj.weight [16, 8] bfloat16: "
        "1.self_attn.o_proj.weight [0, 0] [16, 8]",
        "1.self_attn.q_norm.weight [4] bfloat16: "
        "1.self_attn.q_norm.weight [0] [4]",
        "1.self_attn.k_norm.weight [4] bfloat16: "
        "1.self_attn.k_norm.weight [0] [4]"},
       NextMoe(1, 0),
       {"model.norm.weight [16] bfloat16: model.norm.weight [0] [16]",
        "lm_head.weight [64, 16] bfloat16: lm_head.weight [0, 0] [64, 16]"}});
  EXPECT_THAT(Params(l, "p-d0-p0-e0-t0"), ElementsAreArray(rank0));
  const std::vector<std::string> rank1 = Concat(
      {{"model.embed_tokens.weight [64, 16] bfloat16: "
        "model.embed_tokens.weight [64, 0] [36, 16], pad 896",
        "0.linear_attn.dt_bias [2] bfloat16: 0.linear_attn.dt_bias [2] [2]",
        "0.linear_attn.A_log [2] float32: 0.linear_attn.A_log [2] [2]",
        "0.linear_attn.conv1d.weight [16, 1, 4] bfloat16: "
        "0.linear_attn.conv1d.weight [4, 0, 0] [4, 1, 4], "
        "0.linear_attn.conv1d.weight [12, 0, 0] [4, 1, 4], "
        "0.linear_attn.conv1d.weight [24, 0, 0] [8, 1, 4]",
        "0.linear_attn.in_proj_qkvz.weight [24, 16] bfloat16: "
        "0.linear_attn.in_proj_qkvz.weight [24, 0] [24, 16]",
        "0.linear_attn.in_proj_ba.weight [4, 16] bfloat16: "
        "0.linear_attn.in_proj_ba.weight [4, 0] [4, 16]",
        "0.linear_attn.norm.weight [4] bfloat16: "
        "0.linear_attn.norm.weight [0] [4]",
        "0.linear_attn.out_proj.weight [16, 8] bfloat16: "
        "0.linear_attn.out_proj.weight [0, 8] [16, 8]"},
       NextMoe(0, 1),
       {"1.self_attn.qkv_proj.weight [24, 16] bfloat16: "
        "1.self_attn.q_proj.weight [16, 0] [16, 16], "
        "1.self_attn.k_proj.weight [4, 0] [4, 16], "
        "1.self_attn.v_proj.weight [4, 0] [4, 16]",
        "1.self_attn.o_proj.weight [16, 8] bfloat16: "
        "1.self_attn.o_proj.weight [0, 8] [16, 8]",
        "1.self_attn.q_norm.weight [4] bfloat16: "
        "1.self_attn.q_norm.weight [0] [4]",
        "1.self_attn.k_norm.weight [4] bfloat16: "
        "1.self_attn.k_norm.weight [0] [4]"},
       NextMoe(1, 1),
       {"model.norm.weight [16] bfloat16: model.norm.weight [0] [16]",
        "lm_head.weight [64, 16] bfloat16: lm_head.weight [64, 0] [36, 16], "
        "pad 896"}});
  EXPECT_THAT(Params(l, "p-d0-p0-e0-t1"), ElementsAreArray(rank1));
  // The MTP layer is the draft model's: not held.
  EXPECT_EQ(l.placement().FindTensor("mtp.fc.weight"), nullptr);
}

// Before 0.33 FusedMoE held its weights itself.
TEST(VllmHybridPresetTest, OlderReleasesNameTheExpertsWithoutRoutedExperts) {
  ASSERT_OK_AND_ASSIGN(auto l,
                       MakeEngineLayout(kNext, Grid(1, 1, 1, 1, "vllm@<0.33")));
  EXPECT_EQ(l.engine(), "vllm@<0.33");
  EXPECT_THAT(Params(l, "p-d0-p0-e0-t0", "0.mlp.experts."),
              ElementsAre("0.mlp.experts.w13_weight [2, 16, 16] bfloat16: "
                          "0.mlp.experts.0.gate_proj.weight [0, 0] [8, 16], "
                          "0.mlp.experts.0.up_proj.weight [0, 0] [8, 16], "
                          "0.mlp.experts.1.gate_proj.weight [0, 0] [8, 16], "
                          "0.mlp.experts.1.up_proj.weight [0, 0] [8, 16]",
                          "0.mlp.experts.w2_weight [2, 16, 8] bfloat16: "
                          "0.mlp.experts.0.down_proj.weight [0, 0] [16, 8], "
                          "0.mlp.experts.1.down_proj.weight [0, 0] [16, 8]"));
}

// Both models build the embedding on every stage; Qwen3-Next its head
// too, Qwen3.5 on the last stage only.
TEST(VllmHybridPresetTest, PipelineStages) {
  ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kNext, Grid(1, 2)));
  const std::vector<std::string> moe0 = {
      "0.mlp.gate.weight",
      "0.mlp.shared_expert_gate.weight",
      "0.mlp.shared_expert.gate_up_proj.weight",
      "0.mlp.shared_expert.down_proj.weight",
      "0.mlp.experts.routed_experts.w13_weight",
      "0.mlp.experts.routed_experts.w2_weight",
      "0.input_layernorm.weight",
      "0.post_attention_layernorm.weight"};
  EXPECT_THAT(
      Names(l, "p-d0-p0-e0-t0"),
      ElementsAreArray(Concat(
          {{"model.embed_tokens.weight", "0.linear_attn.dt_bias",
            "0.linear_attn.A_log", "0.linear_attn.conv1d.weight",
            "0.linear_attn.in_proj_qkvz.weight",
            "0.linear_attn.in_proj_ba.weight", "0.linear_attn.norm.weight",
            "0.linear_attn.out_proj.weight"},
           moe0,
           {"lm_head.weight"}})));
  const std::vector<std::string> stage1 = Names(l, "p-d0-p1-e0-t0");
  ASSERT_EQ(stage1.size(), 15u);
  EXPECT_EQ(stage1.front(), "model.embed_tokens.weight");
  EXPECT_EQ(stage1[1], "1.self_attn.qkv_proj.weight");
  EXPECT_THAT(std::vector<std::string>(stage1.end() - 2, stage1.end()),
              ElementsAre("model.norm.weight", "lm_head.weight"));
}

// Qwen3.5's text class: flat config, dense MLP, tied head.
constexpr const char* kQwen35 = R"({
  "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
  "hidden_size": 16, "vocab_size": 100, "num_hidden_layers": 2,
  "layer_types": ["linear_attention", "full_attention"],
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4,
  "intermediate_size": 32, "linear_num_key_heads": 2,
  "linear_num_value_heads": 4, "linear_key_head_dim": 4,
  "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";

TEST(VllmHybridPresetTest, Qwen35SeparateProjectionsAreFusedSectionBySection) {
  ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kQwen35, Grid(2)));
  // in_proj_qkvz: output shards [q, k, v, z], each split on its own;
  // in_proj_ba: [b, a].
  EXPECT_THAT(Params(l, "p-d0-p0-e0-t1", "linear_attn.in_proj"),
              ElementsAre("0.linear_attn.in_proj_qkvz.weight [24, 16] "
                          "bfloat16: 0.linear_attn.in_proj_qkv.weight [4, 0] "
                          "[4, 16], 0.linear_attn.in_proj_qkv.weight [12, 0] "
                          "[4, 16], 0.linear_attn.in_proj_qkv.weight [24, 0] "
                          "[8, 16], 0.linear_attn.in_proj_z.weight [8, 0] "
                          "[8, 16]",
                          "0.linear_attn.in_proj_ba.weight [4, 16] bfloat16: "
                          "0.linear_attn.in_proj_b.weight [2, 0] [2, 16], "
                          "0.linear_attn.in_proj_a.weight [2, 0] [2, 16]"));
  EXPECT_THAT(Params(l, "p-d0-p0-e0-t1", "1.mlp."),
              ElementsAre("1.mlp.gate_up_proj.weight [32, 16] bfloat16: "
                          "1.mlp.gate_proj.weight [16, 0] [16, 16], "
                          "1.mlp.up_proj.weight [16, 0] [16, 16]",
                          "1.mlp.down_proj.weight [16, 16] bfloat16: "
                          "1.mlp.down_proj.weight [0, 16] [16, 16]"));
  // Tied: the head is the embedding; nothing of the MTP layer.
  const std::vector<std::string> names = Names(l, "p-d0-p0-e0-t0");
  EXPECT_EQ(names.back(), "model.norm.weight");
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
  EXPECT_THAT(Params(l, "p-d0-p0-e0-t0", "mtp."), IsEmpty());
  // PP 2 untied: embedding on both stages, the head on the last only.
  ASSERT_OK_AND_ASSIGN(
      auto pp,
      MakeEngineLayout(Replace(kQwen35, R"("tie_word_embeddings": true)",
                               R"("tie_word_embeddings": false)"),
                       Grid(1, 2)));
  EXPECT_EQ(Names(pp, "p-d0-p0-e0-t0").front(), "model.embed_tokens.weight");
  EXPECT_EQ(Names(pp, "p-d0-p0-e0-t0").back(),
            "0.post_attention_layernorm.weight");
  EXPECT_EQ(Names(pp, "p-d0-p1-e0-t0").front(), "model.embed_tokens.weight");
  EXPECT_EQ(Names(pp, "p-d0-p1-e0-t0").back(), "lm_head.weight");
}

// TP above the DeltaNet's key heads: vLLM splits the key dimension, not
// the heads, so at TP 4 each rank of kNext (2 key heads) holds half a key
// head: a contiguous quarter of Qwen3-Next's interleaved in_proj_qkvz,
// its quarter of each conv1d section and one value head's A_log.
TEST(VllmHybridPresetTest, Qwen3NextTpAboveTheKeyHeadsSplitsTheKeyDimension) {
  ASSERT_OK_AND_ASSIGN(
      auto l, MakeEngineLayout(
                  Replace(kNext, R"("num_experts": 2)", R"("num_experts": 4)"),
                  Grid(4)));
  EXPECT_THAT(
      Params(l, "p-d0-p0-e0-t3", "0.linear_attn."),
      ElementsAre(
          "0.linear_attn.dt_bias [1] bfloat16: 0.linear_attn.dt_bias [3] [1]",
          "0.linear_attn.A_log [1] float32: 0.linear_attn.A_log [3] [1]",
          "0.linear_attn.conv1d.weight [8, 1, 4] bfloat16: "
          "0.linear_attn.conv1d.weight [6, 0, 0] [2, 1, 4], "
          "0.linear_attn.conv1d.weight [14, 0, 0] [2, 1, 4], "
          "0.linear_attn.conv1d.weight [28, 0, 0] [4, 1, 4]",
          "0.linear_attn.in_proj_qkvz.weight [12, 16] bfloat16: "
          "0.linear_attn.in_proj_qkvz.weight [36, 0] [12, 16]",
          "0.linear_attn.in_proj_ba.weight [2, 16] bfloat16: "
          "0.linear_attn.in_proj_ba.weight [6, 0] [2, 16]",
          "0.linear_attn.norm.weight [4] bfloat16: "
          "0.linear_attn.norm.weight [0] [4]",
          "0.linear_attn.out_proj.weight [16, 4] bfloat16: "
          "0.linear_attn.out_proj.weight [0, 12] [16, 4]"));
  // Qwen3.5's separate projections split section by section alike.
  ASSERT_OK_AND_ASSIGN(auto q, MakeEngineLayout(kQwen35, Grid(4)));
  EXPECT_THAT(Params(q, "p-d0-p0-e0-t1", "linear_attn.in_proj_qkvz"),
              ElementsAre("0.linear_attn.in_proj_qkvz.weight [12, 16] "
                          "bfloat16: 0.linear_attn.in_proj_qkv.weight [2, 0] "
                          "[2, 16], 0.linear_attn.in_proj_qkv.weight [10, 0] "
                          "[2, 16], 0.linear_attn.in_proj_qkv.weight [20, 0] "
                          "[4, 16], 0.linear_attn.in_proj_z.weight [4, 0] "
                          "[4, 16]"));
}

constexpr const char* kQwen35Moe = R"({
  "architectures": ["Qwen3_5MoeForCausalLM"],
  "model_type": "qwen3_5_moe_text",
  "hidden_size": 16, "vocab_size": 100, "num_hidden_layers": 2,
  "layer_types": ["linear_attention", "full_attention"],
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4,
  "moe_intermediate_size": 8, "shared_expert_intermediate_size": 8,
  "num_experts": 2, "linear_num_key_heads": 2,
  "linear_num_value_heads": 4, "linear_key_head_dim": 4,
  "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";

// Qwen3.5-MoE's text class: every layer sparse, experts as transformers
// saves them (one tensor per expert; the fused form comes from a
// checkpoint: tests/cli/engine_hybrid_cli_test.py).
TEST(VllmHybridPresetTest, Qwen35MoeExperts) {
  ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kQwen35Moe, Grid(2)));
  EXPECT_THAT(
      Params(l, "p-d0-p0-e0-t1", "1.mlp.experts."),
      ElementsAre("1.mlp.experts.routed_experts.w13_weight [2, 8, 16] "
                  "bfloat16: 1.mlp.experts.0.gate_proj.weight [4, 0] [4, 16], "
                  "1.mlp.experts.0.up_proj.weight [4, 0] [4, 16], "
                  "1.mlp.experts.1.gate_proj.weight [4, 0] [4, 16], "
                  "1.mlp.experts.1.up_proj.weight [4, 0] [4, 16]",
                  "1.mlp.experts.routed_experts.w2_weight [2, 16, 4] "
                  "bfloat16: 1.mlp.experts.0.down_proj.weight [0, 4] [16, 4], "
                  "1.mlp.experts.1.down_proj.weight [0, 4] [16, 4]"));
  EXPECT_THAT(Names(l, "p-d0-p0-e0-t0"),
              ::testing::Contains("0.mlp.shared_expert_gate.weight"));
}

// EP with TP > 1 and DP > 1 turns on sequence-parallel MoE: the shared
// expert whole on every rank, the routed experts spread over EP.
TEST(VllmHybridPresetTest, SequenceParallelMoeKeepsTheSharedExpertWhole) {
  ASSERT_OK_AND_ASSIGN(
      auto l, MakeEngineLayout(
                  Replace(kNext, R"("num_experts": 2)", R"("num_experts": 4)"),
                  Grid(2, 1, 4, 2)));
  EXPECT_THAT(
      Params(l, "p-d1-p0-e3-t1", "0.mlp.shared_expert.gate_up"),
      ElementsAre(
          "0.mlp.shared_expert.gate_up_proj.weight [16, 16] "
          "bfloat16: 0.mlp.shared_expert.gate_proj.weight [0, 0] "
          "[8, 16], 0.mlp.shared_expert.up_proj.weight [0, 0] [8, 16]"));
  EXPECT_THAT(Params(l, "p-d1-p0-e3-t1", "0.mlp.experts."),
              ElementsAre("0.mlp.experts.routed_experts.w13_weight [1, 16, 16] "
                          "bfloat16: 0.mlp.experts.3.gate_proj.weight [0, 0] "
                          "[8, 16], 0.mlp.experts.3.up_proj.weight [0, 0] "
                          "[8, 16]",
                          "0.mlp.experts.routed_experts.w2_weight [1, 16, 8] "
                          "bfloat16: 0.mlp.experts.3.down_proj.weight [0, 0] "
                          "[16, 8]"));
  // EP without DP: TP still splits the shared expert.
  ASSERT_OK_AND_ASSIGN(auto ep, MakeEngineLayout(kNext, Grid(2, 1, 2)));
  EXPECT_THAT(Params(ep, "p-d0-p0-e1-t1", "0.mlp.shared_expert.down"),
              ElementsAre("0.mlp.shared_expert.down_proj.weight [16, 4] "
                          "bfloat16: 0.mlp.shared_expert.down_proj.weight "
                          "[0, 4] [16, 4]"));
}

// Without EP FusedMoE flattens TP across DP: rank (d, t) holds part
// d * tp + t of every expert's dp * tp parts; the shared expert splits over
// TP only.
TEST(VllmHybridPresetTest, ExpertsWithoutEpSplitOverDpTimesTp) {
  ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kNext, Grid(2, 1, 1, 2)));
  EXPECT_THAT(Params(l, "p-d1-p0-e0-t0", "0.mlp.experts."),
              ElementsAre("0.mlp.experts.routed_experts.w13_weight [2, 4, 16] "
                          "bfloat16: 0.mlp.experts.0.gate_proj.weight [4, 0] "
                          "[2, 16], 0.mlp.experts.0.up_proj.weight [4, 0] "
                          "[2, 16], 0.mlp.experts.1.gate_proj.weight [4, 0] "
                          "[2, 16], 0.mlp.experts.1.up_proj.weight [4, 0] "
                          "[2, 16]",
                          "0.mlp.experts.routed_experts.w2_weight [2, 16, 2] "
                          "bfloat16: 0.mlp.experts.0.down_proj.weight [0, 4] "
                          "[16, 2], 0.mlp.experts.1.down_proj.weight [0, 4] "
                          "[16, 2]"));
  EXPECT_THAT(Params(l, "p-d1-p0-e0-t0", "0.mlp.shared_expert.down"),
              ElementsAre("0.mlp.shared_expert.down_proj.weight [16, 4] "
                          "bfloat16: 0.mlp.shared_expert.down_proj.weight "
                          "[0, 0] [16, 4]"));
  const TensorDescriptor* gate =
      l.placement().FindTensor("model.layers.0.mlp.experts.0.gate_proj.weight");
  ASSERT_NE(gate, nullptr);
  ASSERT_EQ(gate->parallel_axes().size(), 1u);
  EXPECT_EQ(gate->parallel_axes()[0].over(), AxisKind::kDp);
}

TEST(VllmHybridPresetTest, Refusals) {
  EXPECT_THAT(
      MakeEngineLayout(Replace(kNext, R"("linear_key_head_dim": 4)",
                               R"("linear_key_head_dim": 3)"),
                       Grid(4))
          .status(),
      StatusIs(StatusCode::kInvalidArgument,
               "vllm refuses TP 4: linear_num_key_heads * linear_key_head_dim "
               "= 6 is not divisible by 4"));
  EXPECT_THAT(MakeEngineLayout(kNext, Grid(4)).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "vllm refuses TP 4 above the 2 experts of "
                       "Qwen3NextForCausalLM"));
  EXPECT_THAT(MakeEngineLayout(kQwen35, Grid(2, 1, 2)).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "EP 2 needs routed experts; Qwen3_5ForCausalLM has "
                       "none"));
  EXPECT_THAT(MakeEngineLayout(kNext, Grid(1, 1, 1, 3)).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "vllm refuses DP x TP 3: moe_intermediate_size = 8 is "
                       "not divisible by 3"));
  // EP above the expert count: vLLM gives the ranks without experts
  // zero-size FusedMoE parameters, and so does the preset.
  {
    ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kNext, Grid(2, 1, 4, 2)));
    for (const char* id : {"p-d0-p0-e0-t0", "p-d1-p0-e3-t1"}) {
      const bool none = std::string(id) == "p-d1-p0-e3-t1";
      const EngineParticipant* p = l.FindParticipant(id);
      ASSERT_NE(p, nullptr) << id;
      int found = 0;
      for (const EngineParameter& q : p->parameters) {
        if (q.name == "model.layers.1.mlp.experts.routed_experts.w13_weight") {
          EXPECT_EQ(q.shape, (Dims{none ? 0 : 1, 16, 16})) << id;
          EXPECT_EQ(q.pieces.empty(), none) << id;
          ++found;
        }
        if (q.name == "model.layers.1.mlp.experts.routed_experts.w2_weight") {
          EXPECT_EQ(q.shape, (Dims{none ? 0 : 1, 16, 8})) << id;
          ++found;
        }
      }
      EXPECT_EQ(found, 2) << id;
    }
  }
  EXPECT_THAT(
      MakeEngineLayout(Replace(kNext, R"("tie_word_embeddings": false)",
                               R"("tie_word_embeddings": true)"),
                       Grid(1))
          .status(),
      StatusIs(StatusCode::kInvalidArgument,
               "vllm holds lm_head.weight apart from the embedding in "
               "Qwen3NextForCausalLM (tie_word_embeddings is not followed): "
               "the checkpoint must store lm_head.weight"));
  EXPECT_THAT(
      MakeEngineLayout(kNext, Grid(1, 1, 1, 1, "vllm@<0.10.2")).status(),
      StatusIs(StatusCode::kUnimplemented,
               "engine vllm@<0.10.2 has no Qwen3NextForCausalLM"));
  EngineLayoutOptions fp8 = Grid(1);
  fp8.quantize = "fp8";
  EXPECT_THAT(MakeEngineLayout(kNext, fp8).status(),
              StatusIs(StatusCode::kUnimplemented,
                       "engine preset vllm does not lay out FP8 "
                       "Qwen3NextForCausalLM"));
  const std::string vl = R"({
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
      "hidden_size": 16, "vocab_size": 100, "num_hidden_layers": 2,
      "layer_types": ["linear_attention", "full_attention"],
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4,
      "intermediate_size": 32, "linear_num_key_heads": 2,
      "linear_num_value_heads": 4, "linear_key_head_dim": 4,
      "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4},
    "vision_config": {"depth": 1, "hidden_size": 16, "num_heads": 2,
                      "intermediate_size": 32, "out_hidden_size": 16},
    "torch_dtype": "bfloat16"})";
  EXPECT_THAT(MakeEngineLayout(vl, Grid(1)).status(),
              StatusIs(StatusCode::kUnimplemented,
                       "engine preset vllm lays out the text classes of "
                       "Qwen3.5 (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM), "
                       "not Qwen3_5ForConditionalGeneration (its language "
                       "model under model.language_model.)"));
}

}  // namespace
}  // namespace reshard
