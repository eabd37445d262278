// HfLayout from config.json alone: the sharding rules, stated per tensor.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "reshard/hf.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;

constexpr const char* kQwen3Moe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
  "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 4,
  "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 8,
  "intermediate_size": 48, "moe_intermediate_size": 16, "num_experts": 4,
  "decoder_sparse_step": 1, "mlp_only_layers": [0],
  "torch_dtype": "bfloat16", "rms_norm_eps": 1e-06})";

constexpr const char* kDeepseek = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 3,
  "num_attention_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 16,
  "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
  "intermediate_size": 32, "moe_intermediate_size": 16,
  "n_routed_experts": 4, "n_shared_experts": 1, "first_k_dense_replace": 1,
  "num_nextn_predict_layers": 1, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16",
  "quantization_config": {"quant_method": "fp8", "weight_block_size": [8, 8]}})";

HfLayoutOptions Grid(int64_t tp, int64_t pp, int64_t ep, int64_t dp = 1) {
  HfLayoutOptions o;
  o.sizes = {tp, pp, ep, dp};
  return o;
}

// Per tensor, per participant rank: the fragment's (offset, shape).
using Boxes =
    std::map<std::string, std::map<std::string, std::pair<Dims, Dims>>>;

Boxes BoxesOf(const WeightPlacementManifest& m) {
  Boxes out;
  for (const auto& part : m.parts()) {
    for (const auto& f : part.fragments()) {
      out[f.tensor_id()][part.rank().ToString()] = {f.global_offset(),
                                                    f.local_shape()};
    }
  }
  return out;
}

TEST(HfLayoutTest, Qwen3MoeShardsAsEnginesDo) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kQwen3Moe, Grid(4, 2, 2)));
  const Boxes b = BoxesOf(m);
  const std::string r = "dp=0,pp=0,ep=1,tp=3";
  const std::string l0 = "model.layers.0.";
  // q: 8 heads x 8 over TP 4, dim 0; o: dim 1.
  EXPECT_EQ(b.at(l0 + "self_attn.q_proj.weight").at(r),
            (std::pair<Dims, Dims>{{48, 0}, {16, 32}}));
  EXPECT_EQ(b.at(l0 + "self_attn.o_proj.weight").at(r),
            (std::pair<Dims, Dims>{{0, 48}, {32, 16}}));
  // 2 KV heads under TP 4: every rank holds both.
  EXPECT_EQ(b.at(l0 + "self_attn.k_proj.weight").at(r),
            (std::pair<Dims, Dims>{{0, 0}, {16, 32}}));
  EXPECT_EQ(b.at(l0 + "self_attn.q_norm.weight").at(r),
            (std::pair<Dims, Dims>{{0}, {8}}));
  // Layer 0 is dense (mlp_only_layers).
  EXPECT_EQ(b.at(l0 + "mlp.down_proj.weight").at(r),
            (std::pair<Dims, Dims>{{0, 36}, {32, 12}}));
  EXPECT_EQ(b.count(l0 + "mlp.gate.weight"), 0u);
  // Layer 3 (stage 1): expert 2 lives whole on EP rank 1, at every TP rank.
  const std::string e2 = "model.layers.3.mlp.experts.2.up_proj.weight";
  ASSERT_EQ(b.at(e2).size(), 4u);
  EXPECT_EQ(b.at(e2).at("dp=0,pp=1,ep=1,tp=2"),
            (std::pair<Dims, Dims>{{0, 0}, {16, 32}}));
  EXPECT_EQ(b.at("model.layers.3.mlp.gate.weight").size(), 8u);
  EXPECT_EQ(b.at("model.embed_tokens.weight").count("dp=0,pp=1,ep=0,tp=0"), 0u);
  EXPECT_EQ(b.at("lm_head.weight").at("dp=0,pp=1,ep=0,tp=1"),
            (std::pair<Dims, Dims>{{16, 0}, {16, 32}}));
  const TensorDescriptor* t = m.FindTensor(e2);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->expert_id(), 2);
  EXPECT_EQ(t->layer_id(), 3);
  EXPECT_EQ(t->dtype(), "bfloat16");
}

TEST(HfLayoutTest, WithoutEpExpertsSplitLikeDenseMlps) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kQwen3Moe, Grid(2, 1, 1)));
  const Boxes b = BoxesOf(m);
  EXPECT_EQ(b.at("model.layers.1.mlp.experts.0.down_proj.weight")
                .at("dp=0,pp=0,ep=0,tp=1"),
            (std::pair<Dims, Dims>{{0, 8}, {32, 8}}));
}

TEST(HfLayoutTest, DeepseekV3ScalesFollowTheirWeightsAndMtpIsLast) {
  ASSERT_OK_AND_ASSIGN(auto m, HfLayout(kDeepseek, Grid(2, 3, 2)));
  const Boxes b = BoxesOf(m);
  const std::string r = "dp=0,pp=1,ep=0,tp=1";
  const std::string a = "model.layers.1.self_attn.";
  EXPECT_EQ(m.FindTensor(a + "q_b_proj.weight")->dtype(), "float8_e4m3fn");
  EXPECT_EQ(b.at(a + "q_b_proj.weight").at(r),
            (std::pair<Dims, Dims>{{32, 0}, {32, 16}}));
  EXPECT_EQ(b.at(a + "q_b_proj.weight_scale_inv").at(r),
            (std::pair<Dims, Dims>{{4, 0}, {4, 2}}));
  EXPECT_EQ(b.at(a + "o_proj.weight_scale_inv").at(r),
            (std::pair<Dims, Dims>{{0, 2}, {4, 2}}));
  // Replicated low-rank projections keep whole scales.
  EXPECT_EQ(b.at(a + "kv_a_proj_with_mqa.weight_scale_inv").at(r),
            (std::pair<Dims, Dims>{{0, 0}, {3, 4}}));
  EXPECT_EQ(m.FindTensor("model.layers.1.mlp.gate.weight")->dtype(),
            "bfloat16");
  EXPECT_EQ(b.count("model.layers.0.mlp.experts.0.up_proj.weight"), 0u);
  // The MTP layer (3) and its head on the last stage, vocab-parallel.
  EXPECT_EQ(
      b.at("model.layers.3.shared_head.head.weight").at("dp=0,pp=2,ep=1,tp=1"),
      (std::pair<Dims, Dims>{{32, 0}, {32, 32}}));
  EXPECT_EQ(b.at("model.layers.3.mlp.experts.3.down_proj.weight").size(), 2u);
  EXPECT_EQ(b.at("model.layers.3.eh_proj.weight").size(), 4u);
}

TEST(HfLayoutTest, ConfigErrorsNameTheField) {
  EXPECT_THAT(
      HfLayout(R"({"architectures": ["GPTNeoXForCausalLM"]})", Grid(1, 1, 1)),
      StatusIs(StatusCode::kUnimplemented,
               ::testing::StartsWith("unknown architecture GPTNeoXForCausalLM "
                                     "(supported: LlamaForCausalLM, ")));
  EXPECT_THAT(
      HfLayout(R"({"architectures": ["LlamaForCausalLM"],
                           "hidden_size": 8})",
               Grid(1, 1, 1)),
      StatusIs(StatusCode::kInvalidArgument, "config.json lacks vocab_size"));
  EXPECT_THAT(HfLayout(R"({"architectures": ["LlamaForCausalLM"],
                           "hidden_size": 8.5})",
                       Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: hidden_size must be a non-negative "
                       "integer"));
  std::string huge = kQwen3Moe;
  huge.replace(huge.find("\"num_experts\": 4"), 16,
               "\"num_experts\": 4000000000");
  EXPECT_THAT(HfLayout(huge, Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: the routed expert count 4000000000 "
                       "exceeds 65536"));
  huge = kQwen3Moe;
  huge.replace(huge.find("\"hidden_size\": 32"), 17,
               "\"hidden_size\": 2147483648");
  huge.replace(huge.find("\"vocab_size\": 64"), 16,
               "\"vocab_size\": 2147483648");
  EXPECT_THAT(HfLayout(huge, Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json makes model.embed_tokens.weight larger "
                       "than 2^62 bytes"));
  std::string awq = kQwen3Moe;
  awq.insert(awq.size() - 1,
             R"(, "quantization_config": {"quant_method": "awq"})");
  EXPECT_THAT(HfLayout(awq, Grid(1, 1, 1)),
              StatusIs(StatusCode::kUnimplemented,
                       ::testing::HasSubstr("quant_method awq")));
}

// Finding (issue 58): products of config.json fields were computed in 64
// bits unchecked (MLA's q_b_proj rows num_attention_heads *
// (qk_nope_head_dim + qk_rope_head_dim) wrap to a negative size). Each is
// refused past 2^62 naming the fields, and weight_block_size is bounded
// like every dimension.
TEST(HfLayoutTest, ConfigProductOverflowIsRefused) {
  std::string mla = kDeepseek;
  for (const std::string field :
       {"num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim"}) {
    const std::string from = "\"" + field + "\": ";
    const size_t at = mla.find(from);
    ASSERT_NE(at, std::string::npos) << field;
    mla.replace(at + from.size(), 1, "2147483648");  // one digit before
  }
  EXPECT_THAT(HfLayout(mla, Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: num_attention_heads * (qk_nope_head_dim "
                       "+ qk_rope_head_dim) exceeds 2^62"));
  std::string block = kDeepseek;
  block.replace(block.find("[8, 8]"), 6, "[8, 9223372036854775807]");
  EXPECT_THAT(HfLayout(block, Grid(1, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: quantization_config.weight_block_size "
                       "9223372036854775807 exceeds 2147483648"));
}

TEST(HfLayoutTest, GridErrorsNameTheTensorOrCount) {
  std::string odd = kQwen3Moe;
  odd.replace(odd.find("\"intermediate_size\": 48"), 23,
              "\"intermediate_size\": 44");
  EXPECT_THAT(HfLayout(odd, Grid(8, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "TP 8 does not divide dimension 0 (44) of "
                       "model.layers.0.mlp.gate_proj.weight"));
  EXPECT_THAT(HfLayout(kQwen3Moe, Grid(16, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "TP 16 does not divide the 8 attention heads of "
                       "Qwen3MoeForCausalLM"));
  EXPECT_THAT(HfLayout(kDeepseek, Grid(4, 1, 1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "TP 4 splits dimension 0 (16) of "
                       "model.layers.1.mlp.experts.0.gate_proj.weight into "
                       "shards that are not whole FP8 blocks of 8 (its scale "
                       "model.layers.1.mlp.experts.0.gate_proj."
                       "weight_scale_inv)"));
  EXPECT_THAT(HfLayout(kQwen3Moe, Grid(1, 1, 1, 0)),
              StatusIs(StatusCode::kInvalidArgument, "--dp must be >= 1"));
  EXPECT_THAT(HfLayout(kQwen3Moe, Grid(1, 1, 2, int64_t{1} << 40)),
              StatusIs(StatusCode::kInvalidArgument,
                       "a grid of tp 1 x pp 1 x ep 2 x dp 1099511627776 "
                       "exceeds 1048576 participants"));
  EXPECT_THAT(HfLayout(kQwen3Moe, Grid(2, 2, 2, 1 << 18)),
              StatusIs(StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("exceeds 1048576 participants")));
}

}  // namespace
}  // namespace reshard
