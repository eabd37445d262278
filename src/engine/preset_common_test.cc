// PresetWriter's lookups: a tensor a preset needs and the model lacks is
// an InvalidArgument naming it, whichever writer call meets it, never a
// null tensor dereferenced.

#include "engine/preset_common.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "engine/presets.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::StatusIs;

constexpr const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 16, "vocab_size": 64, "num_hidden_layers": 1,
  "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 24, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"})";

constexpr const char* kMissing =
    "model.layers.0.mlp.experts.0.gate_proj.weight";
const std::string kMessage = "vllm needs tensor " + std::string(kMissing) +
                             ", which the checkpoint lacks";

class PresetWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(config_, ParseHfConfig(kLlama));
    options_.engine = "vllm";
    options_.sizes = {1, 1, 1, 1};
    ASSERT_OK_AND_ASSIGN(canon_,
                         CanonTensors::Make(&config_, nullptr, options_));
    ranks_ = GridRanks(options_.sizes, [](const ParallelSizes&, int64_t,
                                          int64_t) { return int64_t{0}; });
  }

  HfConfig config_;
  EngineLayoutOptions options_;
  CanonTensors canon_;
  std::vector<GridRank> ranks_;
};

TEST_F(PresetWriterTest, MissingTensorIsNamedByEveryCall) {
  EngineBuilder b("vllm", "vllm@0.33", options_.sizes, ranks_);
  PresetWriter w("vllm", config_, canon_, &b);
  const TensorAxes whole{};
  const HfTensor* up = w.Find("model.layers.0.mlp.up_proj.weight");
  ASSERT_NE(up, nullptr);
  // Rows of a slice whose tensor Find missed (the presets' T()).
  EXPECT_EQ(w.Find(kMissing), nullptr);
  EXPECT_THAT(w.Rows("p", {{w.Find(kMissing), whole, 0, 4}, {up, whole, 0, 4}}),
              StatusIs(StatusCode::kInvalidArgument, kMessage));
  EXPECT_THAT(
      w.StackedRows("p", 1,
                    {{{up, whole, 0, 4}, {w.Find(kMissing), whole, 0, 4}}}),
      StatusIs(StatusCode::kInvalidArgument, kMessage));
  EXPECT_THAT(w.Whole("p", kMissing, whole),
              StatusIs(StatusCode::kInvalidArgument, kMessage));
  EXPECT_THAT(w.Cols("p", kMissing, whole, 0, 4),
              StatusIs(StatusCode::kInvalidArgument, kMessage));
  EXPECT_THAT(w.Vocab("p", kMissing, whole, 0, 64),
              StatusIs(StatusCode::kInvalidArgument, kMessage));
  EXPECT_THAT(w.Get(kMissing).status(),
              StatusIs(StatusCode::kInvalidArgument, kMessage));
  // The fused experts of a model saved per expert.
  EXPECT_THAT(
      w.FusedExperts("w13", "w2", "model.layers.0.mlp.experts.", 0, 1, 0, 24,
                     false),
      StatusIs(StatusCode::kInvalidArgument,
               "vllm needs tensor model.layers.0.mlp.experts.gate_up_proj, "
               "which the checkpoint lacks"));
}

// The one list of tensors the presets hold in float32 whatever the model
// dtype, per release: the router bias where the release keeps it float32,
// the gated DeltaNet's A_log in every vllm and sglang release, nothing in
// hf; every other tensor (the bias of a linear layer, another A_log-like
// name) follows the model.
TEST(HoldsFloat32Test, RouterBiasesAndALogPerRelease) {
  const std::string bias = "model.layers.3.mlp.gate.e_score_correction_bias";
  const std::string a_log = "model.layers.0.linear_attn.A_log";
  const std::string others[] = {"model.layers.0.linear_attn.dt_bias",
                                "model.layers.0.self_attn.q_proj.bias",
                                "model.layers.0.mlp.gate.weight",
                                "model.layers.0.A_log"};
  const std::tuple<const char*, bool, bool> cases[] = {
      {"vllm", true, true},          {"vllm@<0.33", true, true},
      {"vllm@<0.10.2", false, true}, {"sglang", true, true},
      {"megatron", true, false},     {"hf", false, false}};
  for (const auto& [spec, holds_bias, holds_a_log] : cases) {
    ASSERT_OK_AND_ASSIGN(EngineRelease release, ResolveEngine(spec));
    EXPECT_EQ(HoldsFloat32(release, HfArch::kDeepseekV3, bias), holds_bias)
        << spec;
    EXPECT_EQ(HoldsFloat32(release, HfArch::kQwen3Next, a_log), holds_a_log)
        << spec;
    // vLLM's GLM-4.5 router weight; DeepSeek's follows the model.
    EXPECT_EQ(HoldsFloat32(release, HfArch::kGlm4Moe,
                           "model.layers.1.mlp.gate.weight"),
              std::string(spec).starts_with("vllm"))
        << spec;
    for (const std::string& other : others) {
      EXPECT_FALSE(HoldsFloat32(release, HfArch::kDeepseekV3, other))
          << spec << " " << other;
    }
  }
}

}  // namespace
}  // namespace reshard::internal
