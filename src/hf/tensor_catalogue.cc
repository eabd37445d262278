// The tensor catalogue: the tensors each supported architecture names for
// a config, with the sharding role inference engines give each
// (docs/hf-checkpoints.md, "Tensor names"). Qwen3-Next's and Qwen3.5's
// hybrid layers and vision tower are in hf_hybrid.cc; config.json is read
// in hf_config.cc.

#include <array>
#include <string>
#include <utility>

#include "hf/config_reader.h"
#include "hf/hf_config.h"
#include "hf/hf_hybrid.h"

namespace reshard::internal {
namespace {

void AddGqaAttention(const HfConfig& c, const std::string& a, int64_t l,
                     TensorList* t) {
  const int64_t h = c.hidden, q = c.heads * c.head_dim,
                kv = c.kv_heads * c.head_dim;
  const bool bias =
      c.attention_bias || c.arch == HfArch::kQwen2 || c.arch == HfArch::kGptOss;
  t->Add(a + "q_proj.weight", {q, h}, HfShard::kColumn, l, true);
  t->Add(a + "k_proj.weight", {kv, h}, HfShard::kKvColumn, l, true);
  t->Add(a + "v_proj.weight", {kv, h}, HfShard::kKvColumn, l, true);
  t->Add(a + "o_proj.weight", {h, q}, HfShard::kRow, l, true);
  if (bias) {
    t->Add(a + "q_proj.bias", {q}, HfShard::kColumn, l);
    t->Add(a + "k_proj.bias", {kv}, HfShard::kKvColumn, l);
    t->Add(a + "v_proj.bias", {kv}, HfShard::kKvColumn, l);
  }
  // Llama's attention_bias also biases o_proj (added after the reduce),
  // as gpt-oss always does.
  if ((c.attention_bias && c.arch == HfArch::kLlama) ||
      c.arch == HfArch::kGptOss) {
    t->Add(a + "o_proj.bias", {h}, HfShard::kReplicated, l);
  }
  // gpt-oss's attention sinks: one value per query head, split with them.
  if (c.arch == HfArch::kGptOss) {
    t->Add(a + "sinks", {c.heads}, HfShard::kColumn, l);
  }
  if (c.arch == HfArch::kQwen3 || c.arch == HfArch::kQwen3Moe || c.qk_norm) {
    t->Add(a + "q_norm.weight", {c.head_dim}, HfShard::kReplicated, l);
    t->Add(a + "k_norm.weight", {c.head_dim}, HfShard::kReplicated, l);
  }
}

void AddMlaAttention(const HfConfig& c, const std::string& a, int64_t l,
                     TensorList* t) {
  const int64_t h = c.hidden, qk = c.heads * (c.qk_nope + c.qk_rope);
  if (c.q_lora_rank) {
    const int64_t r = *c.q_lora_rank;
    t->Add(a + "q_a_proj.weight", {r, h}, HfShard::kReplicated, l, true);
    t->Add(a + "q_a_layernorm.weight", {r}, HfShard::kReplicated, l);
    t->Add(a + "q_b_proj.weight", {qk, r}, HfShard::kColumn, l, true);
  } else {
    t->Add(a + "q_proj.weight", {qk, h}, HfShard::kColumn, l, true);
  }
  t->Add(a + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope, h},
         HfShard::kReplicated, l, true);
  t->Add(a + "kv_a_layernorm.weight", {c.kv_lora_rank}, HfShard::kReplicated,
         l);
  t->Add(a + "kv_b_proj.weight",
         {c.heads * (c.qk_nope + c.v_head), c.kv_lora_rank}, HfShard::kColumn,
         l, true);
  t->Add(a + "o_proj.weight", {h, c.heads * c.v_head}, HfShard::kRow, l, true);
}

}  // namespace

// gate/up (column) and down (row) projections of width `i`.
void AddMlp(const HfConfig& c, const std::string& p, int64_t i, int64_t l,
            TensorList* t, bool bias) {
  const int64_t h = c.hidden;
  t->Add(p + "gate_proj.weight", {i, h}, HfShard::kColumn, l, true);
  t->Add(p + "up_proj.weight", {i, h}, HfShard::kColumn, l, true);
  t->Add(p + "down_proj.weight", {h, i}, HfShard::kRow, l, true);
  if (bias) {
    t->Add(p + "gate_proj.bias", {i}, HfShard::kColumn, l);
    t->Add(p + "up_proj.bias", {i}, HfShard::kColumn, l);
    t->Add(p + "down_proj.bias", {h}, HfShard::kReplicated, l);
  }
}

// Routed experts: `names` are the gate, up and down projection names.
void AddExperts(const HfConfig& c, const std::string& p,
                const std::array<const char*, 3>& names, int64_t l,
                TensorList* t) {
  const int64_t h = c.hidden, i = c.moe_intermediate;
  for (int64_t e = 0; e < c.experts; ++e) {
    const std::string x = p + std::to_string(e) + ".";
    t->Add(x + names[0] + ".weight", {i, h}, HfShard::kColumn, l, true, e);
    t->Add(x + names[1] + ".weight", {i, h}, HfShard::kColumn, l, true, e);
    t->Add(x + names[2] + ".weight", {h, i}, HfShard::kRow, l, true, e);
  }
}

void AddFusedExperts(const HfConfig& c, const std::string& x, int64_t l,
                     TensorList* t) {
  const int64_t e = c.experts, h = c.hidden, i = c.moe_intermediate;
  t->AddGrouped(x + "gate_up_proj", {e, 2 * i, h}, HfShard::kColumn, l);
  t->Sections({i, i});
  t->AddGrouped(x + "down_proj", {e, h, i}, HfShard::kRow, l);
}

namespace {

// gpt-oss's router and experts, every expert in one tensor (dim 0), as
// vLLM loads them. The MXFP4 release packs 32 four-bit values in 16 bytes
// plus one U8 exponent per block of 32 inputs: gate_up [E, 2I] rows (gate
// and up interleaved) split by TP with their rows, down split by TP on its
// input blocks (dim 2). The BF16 exports keep transformers' parameters,
// inputs first: gate_up_proj [E, H, 2I] (gate and up columns interleaved,
// pairs whole in a contiguous split) split by TP on dim 2, down_proj
// [E, I, H] on dim 1 (its inputs). Biases follow their outputs, down's is
// replicated; EP splits dim 0.
void AddGptOssExperts(const HfConfig& c, const std::string& p, int64_t l,
                      TensorList* t) {
  const int64_t e = c.experts, h = c.hidden, i = c.moe_intermediate;
  t->Add(p + "router.weight", {e, h}, HfShard::kReplicated, l);
  t->Add(p + "router.bias", {e}, HfShard::kReplicated, l);
  const std::string x = p + "experts.";
  const auto packed = [&](std::string name, Dims shape, HfShard shard) {
    t->AddGrouped(x + std::move(name), std::move(shape), shard, l);
    t->SetDtype("uint8");
  };
  if (c.mxfp4) {
    packed("gate_up_proj_blocks", {e, 2 * i, h / 32, 16}, HfShard::kColumn);
    packed("gate_up_proj_scales", {e, 2 * i, h / 32}, HfShard::kColumn);
  } else {
    t->AddGrouped(x + "gate_up_proj", {e, h, 2 * i}, HfShard::kRow, l);
  }
  t->AddGrouped(x + "gate_up_proj_bias", {e, 2 * i}, HfShard::kColumn, l);
  if (c.mxfp4) {
    packed("down_proj_blocks", {e, h, i / 32, 16}, HfShard::kRow);
    packed("down_proj_scales", {e, h, i / 32}, HfShard::kRow);
  } else {
    t->AddGrouped(x + "down_proj", {e, i, h}, HfShard::kColumn, l);
  }
  t->AddGrouped(x + "down_proj_bias", {e, h}, HfShard::kReplicated, l);
}

}  // namespace

namespace {

void AddLayer(const HfConfig& c, int64_t l, TensorList* t) {
  const std::string p = c.lm_prefix + "layers." + std::to_string(l) + ".";
  if (IsHybrid(c.arch)) {
    AddHybridLayer(c, p, l, /*mtp=*/false, t);
    return;
  }
  const int64_t h = c.hidden;
  t->Add(p + "input_layernorm.weight", {h}, HfShard::kReplicated, l);
  t->Add(p + "post_attention_layernorm.weight", {h}, HfShard::kReplicated, l);
  if (UsesMla(c.arch)) {
    AddMlaAttention(c, p + "self_attn.", l, t);
  } else {
    AddGqaAttention(c, p + "self_attn.", l, t);
  }
  if (!IsSparseLayer(c, l)) {
    AddMlp(c, p + "mlp.", c.intermediate, l, t, c.mlp_bias);
    return;
  }
  const int64_t e = c.experts;
  if (c.arch == HfArch::kGptOss) {
    AddGptOssExperts(c, p + "mlp.", l, t);
    return;
  }
  // transformers 5's fused form (Mixtral's under mlp.*, as its other
  // families').
  const bool fused = l < c.layers ? c.fused_experts : c.fused_mtp_experts;
  if (c.arch == HfArch::kMixtral && !fused) {
    t->Add(p + "block_sparse_moe.gate.weight", {e, h}, HfShard::kReplicated, l);
    AddExperts(c, p + "block_sparse_moe.experts.", {"w1", "w3", "w2"}, l, t);
    return;
  }
  t->Add(p + "mlp.gate.weight", {e, h}, HfShard::kReplicated, l);
  if (c.router_bias) {
    t->Add(p + "mlp.gate.e_score_correction_bias", {e}, HfShard::kReplicated,
           l);
    t->SetDtype("float32");  // F32 in every release (checkpoints decide)
  }
  if (fused) {
    AddFusedExperts(c, p + "mlp.experts.", l, t);
  } else {
    AddExperts(c, p + "mlp.experts.", {"gate_proj", "up_proj", "down_proj"}, l,
               t);
  }
  if (c.shared_experts > 0) {
    AddMlp(c, p + "mlp.shared_experts.", c.shared_experts * c.moe_intermediate,
           l, t);
  }
}

// A DeepSeek-V3 multi-token-prediction layer: a decoder layer plus its
// own embedding, norms, projection and head.
void AddMtpLayer(const HfConfig& c, int64_t l, TensorList* t) {
  AddLayer(c, l, t);
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const int64_t h = c.hidden;
  t->Add(p + "embed_tokens.weight", {c.vocab, h}, HfShard::kVocab, l);
  t->Add(p + "enorm.weight", {h}, HfShard::kReplicated, l);
  t->Add(p + "hnorm.weight", {h}, HfShard::kReplicated, l);
  t->Add(p + "eh_proj.weight", {h, 2 * h}, HfShard::kReplicated, l);
  t->Add(p + "shared_head.norm.weight", {h}, HfShard::kReplicated, l);
  t->Add(p + "shared_head.head.weight", {c.vocab, h}, HfShard::kVocab, l);
}

// The byte size of a shape, or nullopt past 2^62.
bool FitsBytes(const Dims& shape, int64_t itemsize) {
  uint64_t n = static_cast<uint64_t>(itemsize);
  for (int64_t d : shape) {
    if (n > (uint64_t{1} << 62) / static_cast<uint64_t>(d)) return false;
    n *= static_cast<uint64_t>(d);
  }
  return true;
}

}  // namespace

Result<std::vector<HfTensor>> HfModelTensors(const HfConfig& c) {
  TensorList t(c);
  AddVisionTower(c, &t);
  t.Add(c.lm_prefix + "embed_tokens.weight", {c.vocab, c.hidden},
        HfShard::kVocab, std::nullopt);
  for (int64_t l = 0; l < c.layers; ++l) AddLayer(c, l, &t);
  for (int64_t k = 0; k < c.nextn_layers; ++k) {
    AddMtpLayer(c, c.layers + k, &t);
  }
  AddHybridMtp(c, &t);
  t.Add(c.lm_prefix + "norm.weight", {c.hidden}, HfShard::kReplicated,
        std::nullopt);
  t.out().back().last_stage = true;
  if (!c.tie_word_embeddings || c.stored_tied_head) {
    t.Add("lm_head.weight", {c.vocab, c.hidden}, HfShard::kVocab, std::nullopt);
    t.out().back().last_stage = true;
  }
  for (const HfTensor& x : t.out()) {
    for (int64_t d : x.shape) {
      if (d < 1) {
        return Status::InvalidArgument(
            "config.json gives " + x.name +
            " an empty dimension (check intermediate_size and the "
            "expert and attention sizes)");
      }
    }
    if (!FitsBytes(x.shape, x.itemsize)) {
      return Status::InvalidArgument("config.json makes " + x.name +
                                     " larger than 2^62 bytes");
    }
  }
  return std::move(t.out());
}

}  // namespace reshard::internal
