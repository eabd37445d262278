// Qwen3-Next and Qwen3.5 (dense and MoE): gated DeltaNet linear attention
// between gated full-attention layers, one shared expert with its gate,
// top-level MTP layers, and Qwen3.5's vision tower. The split rules are
// vLLM's (docs/hf-checkpoints.md, "Qwen3-Next and Qwen3.5").

#ifndef RESHARD_HF_HF_HYBRID_H_
#define RESHARD_HF_HF_HYBRID_H_

#include <string>

#include "hf/config_reader.h"
#include "hf/hf_config.h"

namespace reshard::internal {

// The hybrid fields of `text` (Qwen3.5: text_config): linear-attention
// sizes, layer_types or full_attention_interval, attn_output_gate, the
// shared expert, the MTP layer count. Errors name the field.
Status ReadHybridConfig(const ConfigReader& text, HfConfig* c);

// Qwen3.5's vision_config (required for Qwen3.5 architectures).
Status ReadVisionConfig(const ConfigReader& vision, HfConfig* c);

// Decoder layer `l` of a hybrid model under prefix `p` ("...layers.N.");
// `mtp`: a multi-token-prediction layer (always full attention).
void AddHybridLayer(const HfConfig& c, const std::string& p, int64_t l,
                    bool mtp, TensorList* t);

// The top-level mtp.* tensors (fc, norms, layers), on the last stage.
void AddHybridMtp(const HfConfig& c, TensorList* t);

// model.visual.*: Qwen3.5's vision tower, on the first stage.
void AddVisionTower(const HfConfig& c, TensorList* t);

// TP `tp` must divide the linear-attention key heads (in_proj_qkvz and
// in_proj_ba hold whole key-head groups) and the vision heads.
Status CheckHybridTp(const HfConfig& c, int64_t tp);

}  // namespace reshard::internal

#endif  // RESHARD_HF_HF_HYBRID_H_
