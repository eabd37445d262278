// HfLayout from config.json alone for the architectures and release
// conventions beyond the first six (docs/hf-checkpoints.md): each test
// states the split or dtype rule it checks. Checkpoint round trips of the
// same architectures are in tests/cli/hf_cli_test.py.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "reshard/hf.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;

HfLayoutOptions Grid(int64_t tp, int64_t pp, int64_t ep) {
  HfLayoutOptions o;
  o.sizes = {tp, pp, ep, 1};
  return o;
}

// A fragment's (offset, shape).
using B = std::pair<Dims, Dims>;

// The box of `tensor` on the DP 0, PP 0 participant with ranks `ep_tp`
// ("ep=1,tp=0").
B Box(const WeightPlacementManifest& m, const std::string& tensor,
      const std::string& ep_tp) {
  for (const auto& part : m.parts()) {
    if (part.rank().ToString() != "dp=0,pp=0," + ep_tp) continue;
    for (const auto& f : part.fragments()) {
      if (f.tensor_id() == tensor) return {f.global_offset(), f.local_shape()};
    }
  }
  return {};
}

std::string Replace(std::string s, const std::string& from,
                    const std::string& to) {
  return s.replace(s.find(from), from.size(), to);
}

constexpr const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "hidden_size": 32, "vocab_size": 100, "num_hidden_layers": 2,
  "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 8,
  "intermediate_size": 64, "dtype": "bfloat16",
  "quantization_config": {"quant_method": "fp8", "weight_block_size": [8, 8]}})";

// Rule: a vocabulary TP does not divide (151,665 in Qwen2.5, here 100) is
// padded as vLLM pads it, to a multiple of 64 (128), and split in equal
// padded shares (32 rows at TP 4); each rank holds the real rows of its
// share, the padding is in no placement.
TEST(HfArchitecturesTest, VocabularyPaddedPerShardAsVllm) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kQwen3, Grid(4, 1, 1)));
  EXPECT_EQ(Box(m, "lm_head.weight", "ep=0,tp=2"), (B{{64, 0}, {32, 32}}));
  EXPECT_EQ(Box(m, "model.embed_tokens.weight", "ep=0,tp=3"),
            (B{{96, 0}, {4, 32}}));
  // At TP 8 the last rank's 16-row share is all padding.
  EXPECT_THAT(HfLayout(kQwen3, Grid(8, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       ::testing::HasSubstr(
                           "TP 8 cannot split the vocabulary of "
                           "model.embed_tokens.weight (100 rows, 128 padded")));
}

// Rule: without a checkpoint, Qwen's FP8 block scales are BF16 and
// DeepSeek's F32 (and its correction bias F32), as the releases store them.
TEST(HfArchitecturesTest, ConfigOnlyDtypesFollowReleaseConventions) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kQwen3, Grid(2, 1, 1)));
  EXPECT_EQ(
      m.FindTensor("model.layers.0.mlp.up_proj.weight_scale_inv")->dtype(),
      "bfloat16");
  EXPECT_EQ(m.FindTensor("model.layers.0.mlp.up_proj.weight")->dtype(),
            "float8_e4m3fn");
  const std::string kimi = R"({
    "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 32,
    "vocab_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8, "v_head_dim": 8, "intermediate_size": 32,
    "moe_intermediate_size": 16, "n_routed_experts": 4,
    "first_k_dense_replace": 1, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8",
                            "weight_block_size": [8, 8]}})";
  ASSERT_OK_AND_ASSIGN(m, HfLayout(kimi, Grid(1, 1, 1)));
  EXPECT_EQ(
      m.FindTensor("model.layers.1.mlp.gate.e_score_correction_bias")->dtype(),
      "float32");
  EXPECT_EQ(m.FindTensor("model.layers.1.self_attn.q_b_proj.weight_scale_inv")
                ->dtype(),
            "float32");
}

constexpr const char* kQwen3Moe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 32,
  "vocab_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "intermediate_size": 48,
  "moe_intermediate_size": 16, "num_local_experts": 4, "dtype": "bfloat16"})";

// Rule: transformers 5's num_local_experts counts Qwen3-MoE's experts as
// 4.x's num_experts did; a config giving both must agree.
TEST(HfArchitecturesTest, Transformers5ExpertCountKey) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kQwen3Moe, Grid(1, 1, 4)));
  EXPECT_EQ(
      m.FindTensor("model.layers.1.mlp.experts.3.up_proj.weight")->expert_id(),
      3);
  const std::string both = Replace(kQwen3Moe, "\"num_local_experts\": 4",
                                   "\"num_local_experts\": 4, "
                                   "\"num_experts\": 8");
  EXPECT_THAT(HfLayout(both, Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: num_experts 8 disagrees with "
                       "num_local_experts 4"));
}

// Rule: Mistral is Llama's tensors with an explicit head_dim (16 here, not
// hidden / heads = 8); q_proj splits by head over TP.
TEST(HfArchitecturesTest, MistralUsesItsHeadDim) {
  const std::string mistral = R"({
    "architectures": ["MistralForCausalLM"], "hidden_size": 32,
    "vocab_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48,
    "torch_dtype": "bfloat16"})";
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(mistral, Grid(2, 1, 1)));
  EXPECT_EQ(Box(m, "model.layers.0.self_attn.q_proj.weight", "ep=0,tp=1"),
            (B{{32, 0}, {32, 32}}));
  EXPECT_EQ(Box(m, "model.layers.0.self_attn.o_proj.weight", "ep=0,tp=1"),
            (B{{0, 32}, {32, 32}}));
}

// Rule: DeepSeek-V2 without q_lora_rank has a column-parallel q_proj, no
// correction bias whatever the routing, and no MTP layers.
TEST(HfArchitecturesTest, DeepseekV2PlainQueryNoBiasNoMtp) {
  const std::string v2 = R"({
    "architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 32,
    "vocab_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "q_lora_rank": null, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4, "v_head_dim": 8, "intermediate_size": 32,
    "moe_intermediate_size": 16, "n_routed_experts": 4,
    "n_shared_experts": 2, "first_k_dense_replace": 1,
    "topk_method": "group_limited_greedy", "num_nextn_predict_layers": 1,
    "torch_dtype": "bfloat16"})";
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(v2, Grid(2, 1, 2)));
  EXPECT_EQ(Box(m, "model.layers.1.self_attn.q_proj.weight", "ep=1,tp=1"),
            (B{{24, 0}, {24, 32}}));
  EXPECT_EQ(m.FindTensor("model.layers.1.mlp.gate.e_score_correction_bias"),
            nullptr);
  EXPECT_EQ(m.FindTensor("model.layers.2.eh_proj.weight"), nullptr);
  EXPECT_EQ(
      Box(m, "model.layers.1.mlp.shared_experts.gate_proj.weight", "ep=1,tp=1"),
      (B{{16, 0}, {16, 32}}));
}

// Rule: gpt-oss's MXFP4 experts need blocks of 32 inputs.
TEST(HfArchitecturesTest, GptOssNeedsWholeMxfp4Blocks) {
  const std::string oss = R"({
    "architectures": ["GptOssForCausalLM"], "hidden_size": 48,
    "vocab_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64,
    "num_local_experts": 4, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "mxfp4"}})";
  EXPECT_THAT(HfLayout(oss, Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("multiples of 32")));
  ASSERT_OK_AND_ASSIGN(auto m,
                       HfLayout(Replace(oss, "48", "64"), Grid(2, 1, 1)));
  EXPECT_EQ(Box(m, "model.layers.1.mlp.experts.down_proj_blocks", "ep=0,tp=1"),
            (B{{0, 0, 1, 0}, {4, 64, 1, 16}}));
}

constexpr const char* kDeepseekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 32,
  "vocab_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
  "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
  "qk_rope_head_dim": 4, "v_head_dim": 8, "intermediate_size": 32,
  "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1,
  "first_k_dense_replace": 1, "num_nextn_predict_layers": 1,
  "torch_dtype": "bfloat16",
  "quantization_config": {"quant_method": "fp8", "weight_block_size": [8, 8]}})";

// Rule: DeepSeek-V3 without topk_method (transformers' config class has
// none; its model always holds the bias) has the F32 correction bias; an
// explicit greedy topk_method has none. Config-only layouts keep the MTP
// layer config.json counts.
TEST(HfArchitecturesTest, DeepseekV3BiasWithoutTopkMethod) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kDeepseekV3, Grid(1, 1, 1)));
  const TensorDescriptor* bias =
      m.FindTensor("model.layers.1.mlp.gate.e_score_correction_bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->dtype(), "float32");
  EXPECT_NE(m.FindTensor("model.layers.2.eh_proj.weight"), nullptr);
  ASSERT_OK_AND_ASSIGN(
      auto greedy, HfLayout(Replace(kDeepseekV3, R"("n_shared_experts": 1,)",
                                    R"("n_shared_experts": 1,
                                       "topk_method": "greedy",)"),
                            Grid(1, 1, 1)));
  EXPECT_EQ(
      greedy.FindTensor("model.layers.1.mlp.gate.e_score_correction_bias"),
      nullptr);
}

// Rule: --dtype converts the tensors in torch_dtype and the FP8 weights
// (without their scales) and keeps what is stored wider than torch_dtype:
// DeepSeek-V3's F32 correction bias stays F32 under --dtype bfloat16 and
// float16; under --dtype float32 everything is float32.
TEST(HfArchitecturesTest, DtypeKeepsTensorsWiderThanTheModel) {
  for (const char* dtype : {"bfloat16", "float16"}) {
    HfLayoutOptions o = Grid(1, 1, 1);
    o.dtype = dtype;
    ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kDeepseekV3, o));
    EXPECT_EQ(m.FindTensor("model.layers.1.mlp.gate.e_score_correction_bias")
                  ->dtype(),
              "float32");
    EXPECT_EQ(m.FindTensor("model.layers.1.self_attn.q_a_proj.weight")->dtype(),
              dtype);
    EXPECT_EQ(m.FindTensor("model.layers.1.mlp.gate.weight")->dtype(), dtype);
    EXPECT_EQ(
        m.FindTensor("model.layers.1.self_attn.q_a_proj.weight_scale_inv"),
        nullptr);
  }
  HfLayoutOptions o = Grid(1, 1, 1);
  o.dtype = "float32";
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kDeepseekV3, o));
  EXPECT_EQ(m.FindTensor("model.layers.1.self_attn.q_a_proj.weight")->dtype(),
            "float32");
}

}  // namespace
}  // namespace reshard
