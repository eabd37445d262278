// A model's config.json and the tensors its architecture names, with the
// sharding role inference engines give each (docs/hf-checkpoints.md).

#ifndef RESHARD_HF_HF_CONFIG_H_
#define RESHARD_HF_HF_CONFIG_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hf/ignore_list.h"
#include "reshard/conversion.h"
#include "reshard/hf.h"
#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard::internal {

// Architectures by tensor family: MistralForCausalLM is kLlama (the same
// tensors), DeepseekV2ForCausalLM is kDeepseekV2 (V3's MLA and MoE without
// the correction bias and MTP layers).
enum class HfArch {
  kLlama,
  kQwen2,
  kQwen3,
  kQwen3Moe,
  kMixtral,
  kDeepseekV2,
  kDeepseekV3,
  kGlm4Moe,
  kGptOss,
  // Hybrid linear/full attention (gated DeltaNet + gated attention):
  // Qwen3-Next, Qwen3.5 dense and MoE (docs/hf-checkpoints.md).
  kQwen3Next,
  kQwen35,
  kQwen35Moe,
};

// Qwen3-Next and Qwen3.5: linear-attention layers between gated full
// attention layers.
inline bool IsHybrid(HfArch a) {
  return a == HfArch::kQwen3Next || a == HfArch::kQwen35 ||
         a == HfArch::kQwen35Moe;
}

// Multi-head latent attention (DeepSeek-V2/V3).
inline bool UsesMla(HfArch a) {
  return a == HfArch::kDeepseekV2 || a == HfArch::kDeepseekV3;
}

struct HfConfig {
  std::string architecture;  // architectures[0]
  std::string model_type;
  HfArch arch = HfArch::kLlama;
  int64_t hidden = 0, vocab = 0, layers = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t intermediate = 0;
  bool tie_word_embeddings = false;
  // Tied embeddings whose checkpoint stores lm_head.weight anyway
  // (Qwen3-0.6B): the head is laid out like an untied one so that it is
  // written back; engines use model.embed_tokens.weight.
  bool stored_tied_head = false;
  std::string dtype = "float32";  // torch_dtype (or dtype)
  bool attention_bias = false;    // q/k/v (and for Llama o) biases
  bool mlp_bias = false;          // Llama
  bool qk_norm = false;           // GLM-4.5 use_qk_norm
  // MoE.
  int64_t experts = 0;
  int64_t moe_intermediate = 0;
  int64_t shared_experts = 0;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  int64_t first_k_dense = 0;
  int64_t moe_layer_freq = 1;
  bool router_bias = false;  // DeepSeek-V3 noaux_tc, GLM-4.5
  // config.json names topk_method (else DeepSeek-V3's bias is what
  // transformers holds, and a checkpoint decides).
  bool router_bias_declared = false;
  // MLA (DeepSeek-V3).
  std::optional<int64_t> q_lora_rank;
  int64_t kv_lora_rank = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  // DeepSeek-V3 / GLM-4.5 MTP layers (model.layers.<layers + k>.*): the
  // config's count, or with a checkpoint the count it holds (none or all).
  int64_t nextn_layers = 0;
  // FP8 block quantization.
  bool fp8 = false;
  int64_t block_rows = 0, block_cols = 0;
  // Config-only dtypes of what releases store apart from torch_dtype:
  // weight_scale_inv (F32 in DeepSeek's releases, BF16 in Qwen's) and
  // e_score_correction_bias (F32 in DeepSeek, Kimi and GLM releases).
  std::string scale_dtype = "float32";
  // compressed-tensors FP8 with one scale per output channel (GLM-4.5's
  // FP8 release): quantized linear weights carry `weight_scale` [out, 1];
  // `quant_ignore` lists the modules left unquantized (names or "re:"
  // regular expressions), `channel_scale_dtype` the config-only dtype of
  // the scales.
  bool fp8_channel = false;
  std::shared_ptr<const ModuleIgnoreList> quant_ignore;
  std::string channel_scale_dtype = "bfloat16";
  // gpt-oss's MXFP4 release (quant_method mxfp4); without it, the BF16
  // export's experts (gate_up_proj [E, H, 2I], down_proj [E, I, H]).
  bool mxfp4 = false;
  // Where the language model's tensors live: "model." or, for Qwen3.5's
  // vision-language checkpoints, "model.language_model.".
  std::string lm_prefix = "model.";
  // Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM: the language model alone.
  bool text_only = false;
  // Hybrid attention (IsHybrid): which layers are linear attention, the
  // linear heads and sizes, the gate rows of full attention's q_proj.
  std::vector<bool> linear_layers;
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0;
  int64_t conv_kernel = 0;
  bool attn_gate = false;
  // One shared expert with its sigmoid gate (Qwen3-Next, Qwen3.5 MoE).
  int64_t shared_expert_intermediate = 0;
  // Top-level multi-token-prediction layers (mtp.*); `mtp_declared`: the
  // config names their count (else a checkpoint's mtp.layers.N decide).
  int64_t mtp_layers = 0;
  bool mtp_declared = false;
  // Every routed expert of a layer in two 3-D tensors
  // (mlp.experts.gate_up_proj [E, 2I, H], down_proj [E, H, I]) instead of
  // one file tensor per expert: Qwen3.5 MoE's releases and transformers
  // 5's save format of every MoE family but gpt-oss (Mixtral's then under
  // mlp.*, not block_sparse_moe.*); for the decoder layers and for the MTP
  // layers. A checkpoint decides (AdaptToCheckpoint).
  bool fused_experts = false;
  bool fused_mtp_experts = false;
  // Qwen3.5's vision tower (model.visual.*), from vision_config.
  struct Vision {
    int64_t depth = 0, hidden = 0, intermediate = 0, heads = 0;
    int64_t in_channels = 3, patch = 0, temporal_patch = 0, merge = 0;
    int64_t out_hidden = 0, positions = 0;
  };
  std::optional<Vision> vision;
};

// Decodes config.json: the fields the architecture needs are required
// integers (errors name them), the others defaulted as the model
// definitions do. An unknown architecture is an error naming it.
Result<HfConfig> ParseHfConfig(std::string_view json);

// How a tensor is laid out.
enum class HfShard {
  kReplicated,
  kColumn,    // TP splits dim 0
  kRow,       // TP splits dim 1
  kVocab,     // TP splits dim 0 (vocab-parallel)
  kKvColumn,  // TP splits dim 0 at head granularity; replicated when TP
              // exceeds the KV heads
};

struct HfTensor {
  std::string name;
  Dims shape;
  std::string dtype;  // placement dtype
  int64_t itemsize = 0;
  HfShard shard = HfShard::kReplicated;
  // A linear weight of the FP8 schemes' set (docs/conversion.md): what
  // --quantize fp8 quantizes.
  bool linear = false;
  // A linear weight the config's FP8 scheme quantizes (config-only
  // layouts give it F8_E4M3 and a weight_scale_inv companion).
  bool quantized = false;
  std::optional<int64_t> layer;
  std::optional<int64_t> expert;  // routed experts: owned by EP ranks
  // Every routed expert in one tensor, dim 0 the expert (gpt-oss): EP
  // splits dim 0; without EP, TP splits `shard`'s dimension + 1.
  bool grouped_experts = false;
  bool last_stage = false;  // final norm, head, MTP layers
  // A sectioned TP split (TensorLayout::tp_sections): the extents of the
  // fused sections of the split dimension, each split over TP on its own.
  std::vector<int64_t> tp_sections;
};

// What a checkpoint tells a config that config.json does not: a tied head
// stored anyway; the MTP layers it holds (none, although config.json counts
// some, as transformers saves DeepSeek-V3 and GLM-4.5; or the config's
// count; or, where config.json does not count them, as many as it holds);
// DeepSeek-V3's correction bias where config.json has no topk_method;
// fused or per-expert routed experts; Qwen3.5's vision tower or none.
// Errors as ParseHfConfig's bounds (a checkpoint of absurdly many MTP
// layers).
Status AdaptToCheckpoint(const HfCheckpoint& checkpoint, HfConfig* config);

// Whether the config's quantization scheme quantizes linear weight `name`
// (FP8 blocks: every linear; compressed-tensors: those not ignored).
bool QuantizesLinear(const HfConfig& config, std::string_view name);

// Every tensor the architecture names for this config (no FP8 scales),
// in model order.
Result<std::vector<HfTensor>> HfModelTensors(const HfConfig& config);

// Whether layer `l` holds routed experts (else a dense MLP).
bool IsSparseLayer(const HfConfig& config, int64_t l);

// A laid-out tensor: the model's tensor with its final dtype and, for an
// FP8 scale, the weight it follows (an element of the `model` it was made
// from).
struct HfLaidTensor {
  HfTensor t;
  const HfTensor* weight = nullptr;  // set for a weight_scale_inv
};

// The tensors a layout of `model` holds. Config-only (no checkpoint):
// every tensor, quantized weights as F8_E4M3 each followed by its scale.
// With a checkpoint: exactly its tensors less non-persistent buffers, each
// one the architecture names (or the FP8 scale of one) with the shape both
// agree on and the checkpoint's dtype; a named tensor it lacks, or one the
// architecture does not name, is an error.
Result<std::vector<HfLaidTensor>> HfLayoutTensors(
    const HfConfig& config, const std::vector<HfTensor>& model,
    const HfCheckpoint* checkpoint);

// The form a layout asks for (HfLayoutOptions::quantize / block / dtype):
// with `dtype`, every float tensor (FP8 ones included) in that dtype and
// no scale tensors; with quantize "fp8", every float linear weight of
// `model` in float8_e4m3fn followed by its float32 weight_scale_inv for
// `block` (weights already FP8 keep theirs, when their block is `block`).
// Updates `config`'s FP8 fields to the form. Errors name the option.
Status ApplyLayoutForm(std::string_view quantize, const Fp8Block& block,
                       std::string_view dtype,
                       const std::vector<HfTensor>& model, HfConfig* config,
                       std::vector<HfLaidTensor>* laid);

}  // namespace reshard::internal

#endif  // RESHARD_HF_HF_CONFIG_H_
