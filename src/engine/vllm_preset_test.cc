// The vLLM preset (vllm_preset.cc) where vLLM 0.33 holds more than a
// TP-split of the canonical tensors: shared experts whole under
// sequence-parallel MoE. tests/cli/engine_vllm_more_cli_test.py checks
// the loaded bytes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reshard/engine.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using Spm = EngineLayoutOptions::SequenceParallelMoe;

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

EngineLayoutOptions Grid(int64_t tp, int64_t ep, int64_t dp,
                         Spm spm = Spm::kAuto, std::string engine = "vllm") {
  EngineLayoutOptions o;
  o.engine = std::move(engine);
  o.sizes = {tp, 1, ep, dp};
  o.sequence_parallel_moe = spm;
  return o;
}

std::string Text(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    s += (i > 0 ? ", " : "") + std::to_string(d[i]);
  }
  return s + "]";
}

// "name [shape] pieces" of every shared-expert parameter of `participant`.
std::vector<std::string> SharedExperts(const EngineLayout& l,
                                       const std::string& participant) {
  std::vector<std::string> out;
  for (const EngineParameter& q : l.FindParticipant(participant)->parameters) {
    if (q.name.find("shared_experts") == std::string::npos) continue;
    out.push_back(q.name + " " + Text(q.shape) + " " +
                  std::to_string(q.pieces.size()));
  }
  return out;
}

// vLLM turns on sequence-parallel MoE with EP, TP > 1 and DP > 1 under its
// default all2all backend and then builds DeepSeek's shared experts whole
// (DeepseekV2MLP with disable_tp); elsewhere they are TP-split. "on" keeps
// the rule and refuses a grid it does not hold for; "off" (an all2all
// backend outside vLLM's list) splits them at every grid.
TEST(VllmPresetTest, SharedExpertsWholeUnderSequenceParallelMoe) {
  const std::vector<std::string> whole = {
      "model.layers.1.mlp.shared_experts.gate_up_proj.weight [16, 16] 2",
      "model.layers.1.mlp.shared_experts.down_proj.weight [16, 8] 1"};
  const std::vector<std::string> split = {
      "model.layers.1.mlp.shared_experts.gate_up_proj.weight [8, 16] 2",
      "model.layers.1.mlp.shared_experts.down_proj.weight [16, 4] 1"};
  for (Spm spm : {Spm::kAuto, Spm::kOn}) {
    ASSERT_OK_AND_ASSIGN(auto l,
                         MakeEngineLayout(kDeepseekV3, Grid(2, 4, 2, spm)));
    for (const EngineParticipant& p : l.participants()) {
      EXPECT_EQ(SharedExperts(l, p.participant_id), whole) << p.participant_id;
    }
  }
  for (const EngineLayoutOptions& o :
       {Grid(2, 4, 2, Spm::kOff), Grid(2, 2, 1), Grid(2, 1, 1),
        Grid(2, 2, 1, Spm::kOff)}) {
    ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kDeepseekV3, o));
    EXPECT_EQ(SharedExperts(l, l.participants().back().participant_id), split);
  }
  // The sglang preset follows the same rule.
  ASSERT_OK_AND_ASSIGN(
      auto sglang,
      MakeEngineLayout(kDeepseekV3, Grid(2, 4, 2, Spm::kAuto, "sglang")));
  EXPECT_EQ(SharedExperts(sglang, "p-d1-p0-e3-t1"), whole);
  EXPECT_THAT(
      MakeEngineLayout(kDeepseekV3, Grid(2, 2, 1, Spm::kOn)).status(),
      StatusIs(StatusCode::kInvalidArgument,
               "vllm runs sequence-parallel MoE only with expert parallelism, "
               "TP > 1 and DP > 1, not at TP 2, DP 1, EP 2 "
               "(--sequence-parallel-moe on)"));
  for (const char* engine : {"megatron", "hf"}) {
    EXPECT_THAT(
        MakeEngineLayout(kDeepseekV3, Grid(2, 1, 1, Spm::kOff, engine))
            .status(),
        StatusIs(StatusCode::kInvalidArgument,
                 "sequence-parallel MoE (--sequence-parallel-moe) is vLLM's "
                 "and SGLang's; the " +
                     std::string(engine) + " preset takes only auto"));
  }
  EXPECT_THAT(
      ParseSequenceParallelMoe("yes").status(),
      StatusIs(StatusCode::kInvalidArgument,
               "sequence-parallel MoE must be auto, on or off, not yes"));
}

}  // namespace
}  // namespace reshard
