// Qwen3-Next / Qwen3.5 configs and compressed-tensors FP8 (hf_hybrid.h,
// hf_config.cc): the rules config.json decides and the errors that name
// the offending field. Checkpoint round trips and split boxes are in
// tests/cli/hf_cli_test.py (hybrid_split_rules).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "reshard/hf.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

HfLayoutOptions Grid(int64_t tp, int64_t pp, int64_t ep) {
  HfLayoutOptions o;
  o.sizes = {tp, pp, ep, 1};
  return o;
}

std::string Replace(std::string s, const std::string& from,
                    const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

constexpr const char* kNext = R"({
  "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
  "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
  "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16,
  "num_experts": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
  "linear_key_head_dim": 8, "linear_value_head_dim": 8,
  "linear_conv_kernel_dim": 4, "num_nextn_predict_layers": 2,
  "torch_dtype": "bfloat16"})";

// Rule: without layer_types, every full_attention_interval-th layer (4 by
// default) is full attention, the others linear attention; MTP layers are
// full attention and counted by num_nextn_predict_layers.
TEST(HfHybridTest, LayerTypesFromTheInterval) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kNext, Grid(1, 1, 1)));
  for (int l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    EXPECT_NE(m.FindTensor(p + "linear_attn.in_proj_qkvz.weight"), nullptr);
    EXPECT_EQ(m.FindTensor(p + "self_attn.q_proj.weight"), nullptr);
  }
  EXPECT_EQ(
      m.FindTensor("model.layers.3.self_attn.q_proj.weight")->global_shape(),
      (Dims{64, 32}));  // 4 heads of 8 queries and 8 gate rows
  EXPECT_NE(m.FindTensor("mtp.layers.1.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(m.FindTensor("mtp.layers.2.self_attn.q_proj.weight"), nullptr);
  ASSERT_OK_AND_ASSIGN(
      auto every2,
      HfLayout(Replace(kNext, R"("num_experts": 4,)",
                       R"("num_experts": 4, "full_attention_interval": 2,)"),
               Grid(1, 1, 1)));
  EXPECT_NE(every2.FindTensor("model.layers.1.self_attn.q_proj.weight"),
            nullptr);
  // attn_output_gate false: q_proj without gate rows.
  ASSERT_OK_AND_ASSIGN(
      auto ungated,
      HfLayout(Replace(kNext, R"("num_experts": 4,)",
                       R"("num_experts": 4, "attn_output_gate": false,)"),
               Grid(1, 1, 1)));
  EXPECT_EQ(ungated.FindTensor("model.layers.3.self_attn.q_proj.weight")
                ->global_shape(),
            (Dims{32, 32}));
}

TEST(HfHybridTest, ConfigErrorsNameTheField) {
  const std::string types = R"("num_experts": 4, "layer_types": )";
  EXPECT_THAT(
      HfLayout(Replace(kNext, R"("num_experts": 4,)",
                       types + R"(["full_attention"],)"),
               Grid(1, 1, 1)),
      StatusIs(StatusCode::kInvalidArgument,
               "config.json: layer_types must list one type per layer (4)"));
  EXPECT_THAT(
      HfLayout(Replace(kNext, R"("num_experts": 4,)",
                       types + R"(["linear_attention", "sliding_attention",
                                   "linear_attention", "full_attention"],)"),
               Grid(1, 1, 1)),
      StatusIs(StatusCode::kInvalidArgument,
               "config.json: layer_types[1] must be \"linear_attention\" or "
               "\"full_attention\""));
  EXPECT_THAT(HfLayout(Replace(kNext, R"("linear_num_value_heads": 4)",
                               R"("linear_num_value_heads": 3)"),
                       Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: linear_num_value_heads 3 is not a "
                       "multiple of linear_num_key_heads 2"));
  EXPECT_THAT(HfLayout(Replace(kNext, R"("linear_conv_kernel_dim": 4,)", ""),
                       Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json lacks linear_conv_kernel_dim"));
  // Absurd counts fail before anything is sized by them.
  EXPECT_THAT(HfLayout(Replace(kNext, R"("num_hidden_layers": 4)",
                               R"("num_hidden_layers": 1099511627776)"),
                       Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: num_hidden_layers 1099511627776 exceeds "
                       "65536"));
  // in_proj_qkvz holds whole key-head groups: TP must divide them.
  EXPECT_THAT(HfLayout(kNext, Grid(4, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "TP 4 does not divide the 2 linear-attention key heads "
                       "of Qwen3NextForCausalLM"));
}

constexpr const char* kQwen35 = R"({
  "architectures": ["Qwen3_5MoeForConditionalGeneration"],
  "model_type": "qwen3_5_moe", "tie_word_embeddings": false,
  "text_config": {"hidden_size": 32, "vocab_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "moe_intermediate_size": 16,
    "num_experts": 4, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 8,
    "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
    "full_attention_interval": 2, "mtp_num_hidden_layers": 0,
    "dtype": "bfloat16"},
  "vision_config": {"depth": 1, "hidden_size": 16, "num_heads": 2,
    "intermediate_size": 24},
  "torch_dtype": "float16"})";

// Rule: Qwen3.5's language model lives under model.language_model. with
// its fields in text_config; a top-level dtype wins; the vision tower
// (vision_config, transformers' defaults for what it omits) is split by
// TP like vLLM's and must divide its heads.
TEST(HfHybridTest, Qwen35TextConfigAndVisionTower) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kQwen35, Grid(2, 1, 1)));
  const TensorDescriptor* e =
      m.FindTensor("model.language_model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype(), "float16");
  EXPECT_NE(m.FindTensor("lm_head.weight"), nullptr);
  EXPECT_EQ(m.FindTensor("mtp.fc.weight"), nullptr);
  EXPECT_EQ(
      m.FindTensor("model.visual.merger.linear_fc2.weight")->global_shape(),
      (Dims{32, 64}));  // out_hidden_size defaults to hidden_size
  EXPECT_EQ(m.FindTensor("model.visual.pos_embed.weight")->global_shape(),
            (Dims{2304, 16}));
  EXPECT_EQ(
      m.FindTensor("model.language_model.layers.0.mlp.experts.gate_up_proj")
          ->global_shape(),
      (Dims{4, 32, 32}));
  EXPECT_THAT(
      HfLayout(Replace(kQwen35, R"("num_heads": 2)", R"("num_heads": 1)"),
               Grid(2, 1, 1)),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("TP 2 does not divide the 1 vision heads")));
  EXPECT_THAT(
      HfLayout(Replace(kQwen35, R"("text_config")", R"("txt_config")"),
               Grid(1, 1, 1)),
      StatusIs(StatusCode::kInvalidArgument,
               "config.json: Qwen3_5MoeForConditionalGeneration needs a "
               "text_config object"));
}

// Finding (issue 58): the vision merger's width hidden_size *
// spatial_merge_size^2 wrapped in 64 bits (16770530 * 1048785^2 wraps to
// 1071097634, a tensor under 2^62 bytes) and was accepted. Every size
// derived from several fields is computed exactly and refused past 2^62,
// naming the fields.
TEST(HfHybridTest, VisionMergerSizeOverflowIsRefused) {
  const std::string wraps =
      Replace(kQwen35, R"("hidden_size": 16)",
              R"("hidden_size": 16770530, "spatial_merge_size": 1048785)");
  EXPECT_THAT(HfLayout(wraps, Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: vision_config.hidden_size * "
                       "vision_config.spatial_merge_size^2 exceeds 2^62"));
  // The other derived sizes of the hybrid architectures: the gated q_proj
  // rows and the fused linear-attention projection rows.
  const std::string huge_heads =
      Replace(Replace(kNext, R"("num_attention_heads": 4)",
                      R"("num_attention_heads": 2147483648)"),
              R"("head_dim": 8)", R"("head_dim": 2147483648)");
  EXPECT_THAT(HfLayout(huge_heads, Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: num_attention_heads * head_dim * 2 "
                       "(attn_output_gate) exceeds 2^62"));
  const std::string huge_linear = Replace(
      Replace(kNext, R"("linear_num_key_heads": 2)",
              R"("linear_num_key_heads": 2147483648)"),
      R"("linear_key_head_dim": 8)", R"("linear_key_head_dim": 2147483648)");
  EXPECT_THAT(
      HfLayout(Replace(huge_linear, R"("linear_num_value_heads": 4)",
                       R"("linear_num_value_heads": 2147483648)"),
               Grid(1, 1, 1)),
      StatusIs(StatusCode::kInvalidArgument,
               "config.json: 2 * linear_num_key_heads * linear_key_head_dim "
               "+ 2 * linear_num_value_heads * linear_value_head_dim exceeds "
               "2^62"));
}

constexpr const char* kGlmFp8 = R"({
  "architectures": ["Glm4MoeForCausalLM"], "hidden_size": 32,
  "vocab_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 48,
  "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1,
  "first_k_dense_replace": 1, "torch_dtype": "bfloat16",
  "quantization_config": {"quant_method": "compressed-tensors",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}},
    "ignore": ["lm_head", "re:model[.]layers[.]1[.]self_attn[.].*"]}})";

// Rule: compressed-tensors FP8 quantizes every linear weight its ignore
// list (names or "re:" expressions) does not name, each with a
// [out, 1] weight_scale (BF16 without files) split with the rows of a
// column-parallel weight and whole beside a row-parallel one.
TEST(HfHybridTest, CompressedTensorsChannelScales) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kGlmFp8, Grid(2, 1, 1)));
  EXPECT_EQ(m.FindTensor("model.layers.0.self_attn.q_proj.weight")->dtype(),
            "float8_e4m3fn");
  const TensorDescriptor* s =
      m.FindTensor("model.layers.0.self_attn.q_proj.weight_scale");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->dtype(), "bfloat16");
  EXPECT_EQ(s->global_shape(), (Dims{32, 1}));
  EXPECT_EQ(s->shard_dims(), (Dims{0}));
  EXPECT_TRUE(m.FindTensor("model.layers.0.self_attn.o_proj.weight_scale")
                  ->shard_dims()
                  .empty());
  EXPECT_EQ(m.FindTensor("model.layers.1.self_attn.q_proj.weight")->dtype(),
            "bfloat16");
  EXPECT_EQ(m.FindTensor("model.layers.1.self_attn.q_proj.weight_scale"),
            nullptr);
  EXPECT_EQ(
      m.FindTensor("model.layers.1.mlp.experts.0.up_proj.weight")->dtype(),
      "float8_e4m3fn");
}

TEST(HfHybridTest, CompressedTensorsRefusals) {
  EXPECT_THAT(HfLayout(Replace(kGlmFp8, R"("strategy": "channel")",
                               R"("strategy": "tensor")"),
                       Grid(1, 1, 1)),
              StatusIs(StatusCode::kUnimplemented,
                       HasSubstr("; group group_0 is not")));
  // An unbalanced group (as in Python's re, "[.layers[.]" would be one
  // valid class).
  EXPECT_THAT(
      HfLayout(Replace(kGlmFp8, R"("re:model[.]layers)", R"("re:model(layers)"),
               Grid(1, 1, 1)),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("is not a regular expression (missing ): "
                         "model(layers")));
  HfLayoutOptions o = Grid(1, 1, 1);
  o.dtype = "bfloat16";
  EXPECT_THAT(HfLayout(kGlmFp8, o),
              StatusIs(StatusCode::kUnimplemented,
                       HasSubstr("do not convert compressed-tensors FP8")));
  EXPECT_THAT(HfLayout(Replace(kGlmFp8, R"("compressed-tensors")", R"("awq")"),
                       Grid(1, 1, 1)),
              StatusIs(StatusCode::kUnimplemented,
                       HasSubstr("quant_method awq is not supported")));
}

// Rule: the text-only Qwen3.5 classes hold the language model under
// model.* with no vision tower and no MTP layers unless config.json counts
// them; their config is flat (as transformers saves it) or nests
// text_config (a vision-language config renamed: vision_config ignored,
// the top-level dtype wins). Config-only MoE experts are per expert, as
// transformers saves them by default.
TEST(HfHybridTest, Qwen35TextOnlyClasses) {
  const std::string flat = R"({
    "architectures": ["Qwen3_5MoeForCausalLM"],
    "model_type": "qwen3_5_moe_text", "hidden_size": 32, "vocab_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "moe_intermediate_size": 16,
    "num_experts": 4, "shared_expert_intermediate_size": 16,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 8, "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4, "full_attention_interval": 2,
    "dtype": "bfloat16"})";
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(flat, Grid(2, 1, 1)));
  EXPECT_NE(m.FindTensor("model.embed_tokens.weight"), nullptr);
  EXPECT_NE(m.FindTensor("model.layers.0.linear_attn.in_proj_qkv.weight"),
            nullptr);
  EXPECT_NE(m.FindTensor("model.layers.1.mlp.experts.3.down_proj.weight"),
            nullptr);
  EXPECT_EQ(m.FindTensor("model.layers.1.mlp.experts.gate_up_proj"), nullptr);
  EXPECT_EQ(m.FindTensor("mtp.fc.weight"), nullptr);
  ASSERT_OK_AND_ASSIGN(
      auto nested,
      HfLayout(Replace(kQwen35, "Qwen3_5MoeForConditionalGeneration",
                       "Qwen3_5MoeForCausalLM"),
               Grid(2, 1, 1)));
  const TensorDescriptor* e = nested.FindTensor("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype(), "float16");
  for (const TensorDescriptor& t : nested.tensors()) {
    EXPECT_FALSE(t.tensor_id().starts_with("model.visual.")) << t.tensor_id();
    EXPECT_FALSE(t.tensor_id().starts_with("model.language_model."))
        << t.tensor_id();
  }
  ASSERT_OK_AND_ASSIGN(
      auto mtp, HfLayout(Replace(flat, R"("dtype")",
                                 R"("mtp_num_hidden_layers": 1, "dtype")"),
                         Grid(1, 1, 1)));
  EXPECT_NE(mtp.FindTensor("mtp.layers.0.mlp.experts.0.up_proj.weight"),
            nullptr);
}

}  // namespace
}  // namespace reshard
