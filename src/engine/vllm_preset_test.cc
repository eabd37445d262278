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

constexpr const char* kQwen3Fp8 = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "hidden_size": 64, "vocab_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 8,
  "intermediate_size": 128, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "quantization_config": {"quant_method": "fp8", "activation_scheme":
    "dynamic", "weight_block_size": [8, 8]}})";

// "name [shape] dtype fill-hex" of every parameter of layer 0's attention.
std::vector<std::string> Attention0(const EngineLayout& l,
                                    const std::string& participant) {
  std::vector<std::string> out;
  for (const EngineParameter& q : l.FindParticipant(participant)->parameters) {
    if (q.name.rfind("model.layers.0.self_attn.", 0) != 0) continue;
    std::string fill;
    for (const ParameterPiece& piece : q.pieces) {
      static constexpr char kHex[] = "0123456789abcdef";
      for (unsigned char c : piece.fill) {
        fill += kHex[c >> 4];
        fill += kHex[c & 0xF];
      }
    }
    out.push_back(q.name.substr(25) + " " + Text(q.shape) + " " + q.dtype +
                  (fill.empty() ? "" : " " + fill));
  }
  return out;
}

// With a block-FP8 quant config vLLM 0.33's Attention modules hold the
// KV-cache scales q_scale, k_scale, v_scale, prob_scale: 0-dim, the model
// dtype, -1.0 (BaseKVCacheMethod.create_weights under the model's default
// dtype; no checkpoint reshard reads holds them), registered after o_proj
// and before Qwen3's norms. MLA attention (DeepSeek) holds none, nor does
// an unquantized model.
TEST(VllmPresetTest, Fp8AttentionHoldsKvCacheScalesAtMinusOne) {
  ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kQwen3Fp8, Grid(2, 1, 1)));
  const std::vector<std::string> want = {
      "qkv_proj.weight [48, 64] float8_e4m3fn",
      "qkv_proj.weight_scale_inv [6, 8] bfloat16",
      "o_proj.weight [64, 32] float8_e4m3fn",
      "o_proj.weight_scale_inv [8, 4] bfloat16",
      "attn.q_scale [] bfloat16 80bf",
      "attn.k_scale [] bfloat16 80bf",
      "attn.v_scale [] bfloat16 80bf",
      "attn.prob_scale [] bfloat16 80bf",
      "q_norm.weight [8] bfloat16",
      "k_norm.weight [8] bfloat16"};
  EXPECT_EQ(Attention0(l, "p-d0-p0-e0-t1"), want);
  for (const EngineParticipant& p : l.participants()) {
    for (const EngineParameter& q : p.parameters) {
      if (q.name.find("self_attn.attn.") == std::string::npos) continue;
      ASSERT_EQ(q.pieces.size(), 1u) << q.name;
      EXPECT_TRUE(q.pieces[0].padding()) << q.name;
      EXPECT_EQ(q.nbytes(), 2u) << q.name;
    }
  }
  // The bytes as a load writes them: -1.0 in the model dtype.
  ASSERT_OK_AND_ASSIGN(auto memory,
                       ParameterMemory::Allocate(l.participants()[0]));
  const ParameterBuffer& k =
      memory.buffers().at("model.layers.1.self_attn.attn.k_scale");
  ASSERT_EQ(k.nbytes, 2u);
  EXPECT_EQ(std::string(static_cast<const char*>(k.data), 2),
            std::string("\x80\xbf", 2));

  // float16 models hold them in float16 (0xbc00), float32 ones in float32.
  std::string f16 = kQwen3Fp8;
  f16.replace(f16.find("\"bfloat16\""), 10, "\"float16\"");
  ASSERT_OK_AND_ASSIGN(auto h, MakeEngineLayout(f16, Grid(1, 1, 1)));
  EXPECT_EQ(Attention0(h, "p-d0-p0-e0-t0")[4], "attn.q_scale [] float16 00bc");

  // --quantize fp8 of a BF16 model is the same FP8 model.
  std::string bf16 = kQwen3Fp8;
  bf16.erase(bf16.find(",\n  \"quantization_config\""));
  bf16 += "}";
  EngineLayoutOptions q = Grid(2, 1, 1);
  q.quantize = "fp8";
  q.block = {8, 8};
  ASSERT_OK_AND_ASSIGN(auto quantized, MakeEngineLayout(bf16, q));
  // (reshard's quantization writes float32 scales; Qwen's configs imply
  // bfloat16 ones.)
  std::vector<std::string> want_quantized = want;
  want_quantized[1] = "qkv_proj.weight_scale_inv [6, 8] float32";
  want_quantized[3] = "o_proj.weight_scale_inv [8, 4] float32";
  EXPECT_EQ(Attention0(quantized, "p-d0-p0-e0-t1"), want_quantized);

  // Unquantized: no scales. DeepSeek's MLA (MLAAttention): none either.
  ASSERT_OK_AND_ASSIGN(auto plain, MakeEngineLayout(bf16, Grid(2, 1, 1)));
  // (Attention0 strips "model.layers.0.self_attn.".)
  for (const std::string& s : Attention0(plain, "p-d0-p0-e0-t0")) {
    EXPECT_EQ(s.find("attn."), std::string::npos) << s;
  }
  EngineLayoutOptions ds = Grid(2, 1, 1);
  ds.quantize = "fp8";
  ds.block = {4, 4};
  ASSERT_OK_AND_ASSIGN(auto mla, MakeEngineLayout(kDeepseekV3, ds));
  for (const EngineParticipant& p : mla.participants()) {
    for (const EngineParameter& x : p.parameters) {
      EXPECT_EQ(x.name.find("self_attn.attn."), std::string::npos) << x.name;
    }
  }
}

// Qwen3-MoE block-FP8 with 64x64 blocks (tests/conformance's "wide" model):
// the experts' 128 intermediate rows split into 32 per rank at TP 4.
std::string Qwen3MoeFp8(int64_t moe_intermediate, int64_t block) {
  return R"({"architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe", "hidden_size": 128, "vocab_size": 128,
    "num_hidden_layers": 1, "num_attention_heads": 8,
    "num_key_value_heads": 8, "head_dim": 32, "intermediate_size": 256,
    "moe_intermediate_size": )" +
         std::to_string(moe_intermediate) + R"(, "num_experts": 4,
    "num_experts_per_tok": 2, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "quantization_config": {"quant_method":
    "fp8", "activation_scheme": "dynamic", "weight_block_size": [)" +
         std::to_string(block) + ", " + std::to_string(block) + "]}}";
}

// vLLM 0.33 loads block-FP8 experts whose TP shard is not whole blocks by
// refining its MoE scale blocks (refine_fp8_moe_block_shape: the gcd of
// the block, the shard and hidden, at least 32), each stored scale
// repeated over the refined blocks it covers: a parameter no box of the
// scale tensor fills, so the preset refuses it naming the rule; where no
// refinement of 32 or more exists vLLM itself refuses. Whole blocks (TP 2,
// or EP keeping every expert whole) lay out as before.
TEST(VllmPresetTest, Fp8ExpertsVllmRefinesAreRefusedNamingTheRefinement) {
  const std::string wide = Qwen3MoeFp8(128, 64);
  EXPECT_THAT(
      MakeEngineLayout(wide, Grid(4, 1, 1)).status(),
      StatusIs(StatusCode::kUnimplemented,
               "the vllm preset does not lay out block-FP8 experts "
               "model.layers.0.mlp.experts.routed_experts.w13_weight: it "
               "holds rows [0, 32) of every expert's gate_proj and up_proj, "
               "not whole 64-row blocks of their weight_scale_inv; vLLM 0.33 "
               "loads them with its MoE scale blocks refined to 32x32 "
               "(refine_fp8_moe_block_shape), each stored weight_scale_inv "
               "value repeated over the 2x2 refined blocks it covers, which "
               "reshard does not model (a parameter's pieces are boxes of "
               "the checkpoint's tensors); expert parallelism (--ep 4) keeps "
               "every expert whole"));
  ASSERT_OK_AND_ASSIGN(auto ep, MakeEngineLayout(wide, Grid(4, 4, 1)));
  ASSERT_OK_AND_ASSIGN(auto tp2, MakeEngineLayout(wide, Grid(2, 1, 1)));
  for (const EngineParameter& q : tp2.participants()[1].parameters) {
    if (q.name ==
        "model.layers.0.mlp.experts.routed_experts.w13_weight_scale_inv") {
      EXPECT_EQ(Text(q.shape), "[4, 2, 2]");
    }
  }
  // A TP 1 shard that ends in a partial block is refined too (96 rows of
  // 64-row blocks: 32x32), where the checkpoint's edge block would
  // otherwise pass for what vLLM holds; no EP helps.
  EXPECT_THAT(
      MakeEngineLayout(Qwen3MoeFp8(96, 64), Grid(1, 1, 1)).status(),
      StatusIs(StatusCode::kUnimplemented,
               ::testing::AllOf(::testing::HasSubstr("rows [0, 96) of every "
                                                     "expert's gate_proj"),
                                ::testing::HasSubstr("refined to 32x32"),
                                ::testing::Not(::testing::HasSubstr("--ep")))));
  // No refinement of 32 or more: vLLM refuses (validate_fp8_block_shape_moe).
  EXPECT_THAT(MakeEngineLayout(Qwen3MoeFp8(96, 16), Grid(4, 1, 1)).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "vllm refuses block-FP8 experts "
                       "model.layers.0.mlp.experts.routed_experts.w13_weight: "
                       "it holds rows [0, 24) of every expert's gate_proj and "
                       "up_proj, not whole 16-row blocks of their "
                       "weight_scale_inv (as vLLM does: "
                       "validate_fp8_block_shape_moe, no refined block of 32 "
                       "or more divides them)"));
}

// Without EP FusedMoE flattens TP across DP: rank (d, t) holds rows
// [(d * tp + t) * il, ...) of every expert, il = I / (dp * tp), declared a
// TP split spanning DP; the shared experts split over TP only. Block-FP8
// experts must be whole blocks of the dp * tp shard.
TEST(VllmPresetTest, ExpertsWithoutEpSplitOverDpTimesTp) {
  ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kDeepseekV3, Grid(2, 1, 2)));
  const EngineParticipant* p = l.FindParticipant("p-d1-p0-e0-t0");
  ASSERT_NE(p, nullptr);
  std::vector<std::string> w13;
  for (const EngineParameter& q : p->parameters) {
    if (q.name != "model.layers.1.mlp.experts.routed_experts.w13_weight") {
      continue;
    }
    EXPECT_EQ(Text(q.shape), "[4, 4, 16]");
    for (const auto& piece : q.pieces) {
      const PlacementFragment* f =
          l.placement().FindFragment(piece.placement_fragment_id);
      ASSERT_NE(f, nullptr);
      w13.push_back(f->tensor_id() + " " + Text(f->global_offset()) + " " +
                    Text(f->local_shape()));
    }
  }
  ASSERT_EQ(w13.size(), 8u);
  EXPECT_EQ(w13[0],
            "model.layers.1.mlp.experts.0.gate_proj.weight [4, 0] [2, 16]");
  EXPECT_EQ(w13[1],
            "model.layers.1.mlp.experts.0.up_proj.weight [4, 0] [2, 16]");
  EXPECT_EQ(SharedExperts(l, "p-d1-p0-e0-t0"),
            (std::vector<std::string>{
                "model.layers.1.mlp.shared_experts.gate_up_proj.weight [8, 16] "
                "2",
                "model.layers.1.mlp.shared_experts.down_proj.weight [16, 4] "
                "1"}));
  const TensorDescriptor* down =
      l.placement().FindTensor("model.layers.1.mlp.experts.3.down_proj.weight");
  ASSERT_NE(down, nullptr);
  ASSERT_EQ(down->parallel_axes().size(), 1u);
  EXPECT_EQ(down->parallel_axes()[0].over(), AxisKind::kDp);
  EXPECT_EQ(down->parallel_axes()[0].dim(), 1);
  // 128 rows over DP 2 x TP 2: 32-row shards of 64-row blocks, as at TP 4.
  EXPECT_THAT(MakeEngineLayout(Qwen3MoeFp8(128, 64), Grid(2, 1, 2)).status(),
              StatusIs(StatusCode::kUnimplemented,
                       ::testing::HasSubstr("holds rows [0, 32) of every "
                                            "expert's gate_proj and up_proj, "
                                            "not whole 64-row blocks")));
  ASSERT_OK_AND_ASSIGN(auto fp8,
                       MakeEngineLayout(Qwen3MoeFp8(256, 64), Grid(2, 1, 2)));
  for (const EngineParameter& q : fp8.participants()[3].parameters) {
    if (q.name ==
        "model.layers.0.mlp.experts.routed_experts.w13_weight_scale_inv") {
      EXPECT_EQ(Text(q.shape), "[4, 2, 2]");
    }
  }
  EXPECT_THAT(MakeEngineLayout(kDeepseekV3, Grid(1, 1, 3)).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "vllm refuses DP x TP 3: moe_intermediate_size = 8 is "
                       "not divisible by 3"));
}

constexpr const char* kGlm4Moe = R"({
  "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
  "hidden_size": 16, "vocab_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
  "intermediate_size": 32, "moe_intermediate_size": 8,
  "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
  "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
  "attention_bias": true, "use_qk_norm": true,
  "num_nextn_predict_layers": 0, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"})";

// "name [shape] dtype pieces" of every parameter of `participant`, in
// engine order.
std::vector<std::string> Parameters(const EngineLayout& l,
                                    const std::string& participant) {
  std::vector<std::string> out;
  for (const EngineParameter& q : l.FindParticipant(participant)->parameters) {
    out.push_back(q.name + " " + Text(q.shape) + " " + q.dtype + " " +
                  std::to_string(q.pieces.size()));
  }
  return out;
}

// GLM-4.5 as vLLM 0.33's Glm4MoeForCausalLM holds it at TP 2: qkv_proj
// with its bias, q/k norms after the attention's linear layers, a dense
// first layer, then the router (weight and correction bias float32
// whatever the model dtype), shared experts TP-split and the routed
// experts under routed_experts; named_parameters() order. With EP 2 each
// rank holds two whole experts; vllm@<0.33 names them without
// routed_experts.
TEST(VllmPresetTest, Glm4MoeNamesShapesDtypesAndOrder) {
  ASSERT_OK_AND_ASSIGN(auto l, MakeEngineLayout(kGlm4Moe, Grid(2, 1, 1)));
  EXPECT_EQ(l.participants().size(), 2u);
  const std::vector<std::string> want = {
      "model.embed_tokens.weight [32, 16] bfloat16 1",
      "model.layers.0.self_attn.qkv_proj.weight [32, 16] bfloat16 3",
      "model.layers.0.self_attn.qkv_proj.bias [32] bfloat16 3",
      "model.layers.0.self_attn.o_proj.weight [16, 16] bfloat16 1",
      "model.layers.0.self_attn.q_norm.weight [8] bfloat16 1",
      "model.layers.0.self_attn.k_norm.weight [8] bfloat16 1",
      "model.layers.0.mlp.gate_up_proj.weight [32, 16] bfloat16 2",
      "model.layers.0.mlp.down_proj.weight [16, 16] bfloat16 1",
      "model.layers.0.input_layernorm.weight [16] bfloat16 1",
      "model.layers.0.post_attention_layernorm.weight [16] bfloat16 1",
      "model.layers.1.self_attn.qkv_proj.weight [32, 16] bfloat16 3",
      "model.layers.1.self_attn.qkv_proj.bias [32] bfloat16 3",
      "model.layers.1.self_attn.o_proj.weight [16, 16] bfloat16 1",
      "model.layers.1.self_attn.q_norm.weight [8] bfloat16 1",
      "model.layers.1.self_attn.k_norm.weight [8] bfloat16 1",
      "model.layers.1.mlp.gate.weight [4, 16] float32 1",
      "model.layers.1.mlp.gate.e_score_correction_bias [4] float32 1",
      "model.layers.1.mlp.shared_experts.gate_up_proj.weight [8, 16] "
      "bfloat16 2",
      "model.layers.1.mlp.shared_experts.down_proj.weight [16, 4] bfloat16 1",
      "model.layers.1.mlp.experts.routed_experts.w13_weight [4, 8, 16] "
      "bfloat16 8",
      "model.layers.1.mlp.experts.routed_experts.w2_weight [4, 16, 4] "
      "bfloat16 4",
      "model.layers.1.input_layernorm.weight [16] bfloat16 1",
      "model.layers.1.post_attention_layernorm.weight [16] bfloat16 1",
      "model.norm.weight [16] bfloat16 1",
      "lm_head.weight [32, 16] bfloat16 1"};
  EXPECT_EQ(Parameters(l, "p-d0-p0-e0-t1"), want);
  ASSERT_OK_AND_ASSIGN(auto ep, MakeEngineLayout(kGlm4Moe, Grid(2, 2, 1)));
  ASSERT_OK_AND_ASSIGN(
      auto old,
      MakeEngineLayout(kGlm4Moe, Grid(2, 2, 1, Spm::kAuto, "vllm@<0.33")));
  std::vector<std::string> experts, old_experts;
  for (const std::string& q : Parameters(ep, "p-d0-p0-e1-t1")) {
    if (q.find("experts.") != std::string::npos) experts.push_back(q);
  }
  for (const std::string& q : Parameters(old, "p-d0-p0-e1-t1")) {
    if (q.find("experts.") != std::string::npos) old_experts.push_back(q);
  }
  EXPECT_EQ(experts,
            (std::vector<std::string>{
                "model.layers.1.mlp.shared_experts.gate_up_proj.weight "
                "[8, 16] bfloat16 2",
                "model.layers.1.mlp.shared_experts.down_proj.weight [16, 4] "
                "bfloat16 1",
                "model.layers.1.mlp.experts.routed_experts.w13_weight "
                "[2, 16, 16] bfloat16 4",
                "model.layers.1.mlp.experts.routed_experts.w2_weight "
                "[2, 16, 8] bfloat16 2"}));
  EXPECT_EQ(old_experts[2],
            "model.layers.1.mlp.experts.w13_weight [2, 16, 16] bfloat16 4");
}

}  // namespace
}  // namespace reshard
