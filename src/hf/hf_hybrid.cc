// Qwen3-Next and Qwen3.5: config fields and tensors (hf_hybrid.h).

#include "hf/hf_hybrid.h"

#include <utility>

#include "util/printable.h"

namespace reshard::internal {
namespace {

Status ReadLayerTypes(const ConfigReader& r, HfConfig* c) {
  // Bounded before the per-layer table is sized (CheckBounds' limit).
  if (c->layers > (int64_t{1} << 16)) {
    return Status::InvalidArgument("config.json: num_hidden_layers " +
                                   std::to_string(c->layers) +
                                   " exceeds 65536");
  }
  c->linear_layers.assign(static_cast<size_t>(c->layers), false);
  if (!r.Has("layer_types")) {
    // transformers builds layer_types from the interval: every interval-th
    // layer is full attention.
    RESHARD_ASSIGN_OR_RETURN(int64_t every,
                             r.Int("full_attention_interval", 4));
    if (every < 1) {
      return Status::InvalidArgument(
          "config.json: full_attention_interval must be at least 1");
    }
    for (int64_t l = 0; l < c->layers; ++l) {
      c->linear_layers[static_cast<size_t>(l)] = (l + 1) % every != 0;
    }
    return Status::OK();
  }
  simdjson::dom::array types;
  if (r.object()["layer_types"].get_array().get(types) != 0 ||
      static_cast<int64_t>(types.size()) != c->layers) {
    return Status::InvalidArgument(
        "config.json: layer_types must list one type per layer (" +
        std::to_string(c->layers) + ")");
  }
  size_t l = 0;
  for (auto e : types) {
    std::string_view type;
    if (e.get_string().get(type) != 0 ||
        (type != "linear_attention" && type != "full_attention")) {
      return Status::InvalidArgument(
          "config.json: layer_types[" + std::to_string(l) +
          "] must be \"linear_attention\" or \"full_attention\"");
    }
    c->linear_layers[l++] = type == "linear_attention";
  }
  return Status::OK();
}

// Full attention with the output gate: q_proj's rows are, per head, the
// head's queries then its gate (q_h | gate_h), so the column split by
// heads keeps each head's gate with it.
void AddGatedAttention(const HfConfig& c, const std::string& a, int64_t l,
                       TensorList* t) {
  const int64_t h = c.hidden, q = c.heads * c.head_dim,
                kv = c.kv_heads * c.head_dim;
  t->Add(a + "q_proj.weight", {q * (c.attn_gate ? 2 : 1), h}, HfShard::kColumn,
         l, true);
  t->Add(a + "k_proj.weight", {kv, h}, HfShard::kKvColumn, l, true);
  t->Add(a + "v_proj.weight", {kv, h}, HfShard::kKvColumn, l, true);
  t->Add(a + "o_proj.weight", {h, q}, HfShard::kRow, l, true);
  if (c.attention_bias) {
    t->Add(a + "q_proj.bias", {q * (c.attn_gate ? 2 : 1)}, HfShard::kColumn, l);
    t->Add(a + "k_proj.bias", {kv}, HfShard::kKvColumn, l);
    t->Add(a + "v_proj.bias", {kv}, HfShard::kKvColumn, l);
  }
  t->Add(a + "q_norm.weight", {c.head_dim}, HfShard::kReplicated, l);
  t->Add(a + "k_norm.weight", {c.head_dim}, HfShard::kReplicated, l);
}

// Gated DeltaNet. Qwen3-Next fuses its projections per key-head group
// (in_proj_qkvz rows: q_g | k_g | v_g | z_g for each group g; in_proj_ba:
// b_g | a_g), so a contiguous row split hands each rank whole groups.
// Qwen3.5 keeps [all q | all k | all v] in in_proj_qkv, split section by
// section, and z, b, a apart. conv1d's channels are [q | k | v] in both,
// split section by section so that each rank's channels are its heads'.
void AddLinearAttention(const HfConfig& c, const std::string& a, int64_t l,
                        TensorList* t) {
  const int64_t h = c.hidden, k = c.lin_k_heads * c.lin_k_dim,
                v = c.lin_v_heads * c.lin_v_dim, nv = c.lin_v_heads;
  if (c.arch == HfArch::kQwen3Next) {
    t->Add(a + "in_proj_qkvz.weight", {2 * k + 2 * v, h}, HfShard::kColumn, l,
           true);
    t->Add(a + "in_proj_ba.weight", {2 * nv, h}, HfShard::kColumn, l);
  } else {
    t->Add(a + "in_proj_qkv.weight", {2 * k + v, h}, HfShard::kColumn, l, true);
    t->Sections({k, k, v});
    t->Add(a + "in_proj_z.weight", {v, h}, HfShard::kColumn, l, true);
    t->Add(a + "in_proj_b.weight", {nv, h}, HfShard::kColumn, l);
    t->Add(a + "in_proj_a.weight", {nv, h}, HfShard::kColumn, l);
  }
  t->Add(a + "conv1d.weight", {2 * k + v, 1, c.conv_kernel}, HfShard::kColumn,
         l);
  t->Sections({k, k, v});
  t->Add(a + "dt_bias", {nv}, HfShard::kColumn, l);
  t->Add(a + "A_log", {nv}, HfShard::kColumn, l);
  t->Add(a + "norm.weight", {c.lin_v_dim}, HfShard::kReplicated, l);
  t->Add(a + "out_proj.weight", {h, v}, HfShard::kRow, l, true);
}

}  // namespace

Status ReadHybridConfig(const ConfigReader& r, HfConfig* c) {
  const std::pair<const char*, int64_t*> sizes[] = {
      {"linear_num_key_heads", &c->lin_k_heads},
      {"linear_num_value_heads", &c->lin_v_heads},
      {"linear_key_head_dim", &c->lin_k_dim},
      {"linear_value_head_dim", &c->lin_v_dim},
      {"linear_conv_kernel_dim", &c->conv_kernel}};
  for (const auto& [name, field] : sizes) {
    RESHARD_ASSIGN_OR_RETURN(*field, r.Int(name));
    if (*field < 1) {
      return Status::InvalidArgument(std::string("config.json: ") + name +
                                     " must be at least 1");
    }
  }
  if (c->lin_v_heads % c->lin_k_heads != 0) {
    return Status::InvalidArgument(
        "config.json: linear_num_value_heads " +
        std::to_string(c->lin_v_heads) +
        " is not a multiple of linear_num_key_heads " +
        std::to_string(c->lin_k_heads));
  }
  RESHARD_RETURN_NOT_OK(ReadLayerTypes(r, c));
  RESHARD_ASSIGN_OR_RETURN(c->attn_gate, r.Bool("attn_output_gate", true));
  if (c->experts > 0) {
    RESHARD_ASSIGN_OR_RETURN(c->shared_expert_intermediate,
                             r.Int("shared_expert_intermediate_size", 0));
  }
  // Qwen3-Next counts its MTP layers as num_nextn_predict_layers (vLLM
  // assumes 1 when absent), Qwen3.5 as mtp_num_hidden_layers.
  const char* mtp = c->arch == HfArch::kQwen3Next ? "num_nextn_predict_layers"
                                                  : "mtp_num_hidden_layers";
  // The text-only Qwen3.5 classes hold no MTP layers unless the config
  // counts them (transformers' and vLLM's classes have none).
  c->mtp_declared = r.Has(mtp);
  RESHARD_ASSIGN_OR_RETURN(c->mtp_layers, r.Int(mtp, c->text_only ? 0 : 1));
  // Config-only Qwen3.5 MoE: the BF16 releases' fused decoder experts and
  // per-expert MTP experts; the text-only class as transformers saves it by
  // default, per expert (a checkpoint decides: AdaptToCheckpoint).
  c->fused_experts = c->arch == HfArch::kQwen35Moe && !c->text_only;
  c->fused_mtp_experts = false;
  return Status::OK();
}

Status ReadVisionConfig(const ConfigReader& r, HfConfig* c) {
  // transformers' Qwen3.5 vision defaults.
  HfConfig::Vision v;
  const std::tuple<const char*, int64_t*, int64_t> fields[] = {
      {"depth", &v.depth, 27},
      {"hidden_size", &v.hidden, 1152},
      {"intermediate_size", &v.intermediate, 4304},
      {"num_heads", &v.heads, 16},
      {"in_channels", &v.in_channels, 3},
      {"patch_size", &v.patch, 16},
      {"temporal_patch_size", &v.temporal_patch, 2},
      {"spatial_merge_size", &v.merge, 2},
      {"out_hidden_size", &v.out_hidden, c->hidden},
      {"num_position_embeddings", &v.positions, 2304}};
  for (const auto& [name, field, fallback] : fields) {
    auto value = r.Int(name, fallback);
    if (!value.ok() || *value < 1 || *value > (int64_t{1} << 24)) {
      return Status::InvalidArgument(
          std::string("config.json: vision_config.") + name +
          " must be an integer in [1, 2^24]");
    }
    *field = *value;
  }
  if (v.hidden % v.heads != 0) {
    return Status::InvalidArgument(
        "config.json: vision_config.num_heads " + std::to_string(v.heads) +
        " does not divide its hidden_size " + std::to_string(v.hidden));
  }
  c->vision = v;
  return Status::OK();
}

void AddHybridLayer(const HfConfig& c, const std::string& p, int64_t l,
                    bool mtp, TensorList* t) {
  const int64_t h = c.hidden;
  t->Add(p + "input_layernorm.weight", {h}, HfShard::kReplicated, l);
  t->Add(p + "post_attention_layernorm.weight", {h}, HfShard::kReplicated, l);
  if (!mtp && c.linear_layers[static_cast<size_t>(l)]) {
    AddLinearAttention(c, p + "linear_attn.", l, t);
  } else {
    AddGatedAttention(c, p + "self_attn.", l, t);
  }
  const bool sparse = c.experts > 0 && (mtp || IsSparseLayer(c, l));
  if (!sparse) {
    AddMlp(c, p + "mlp.", c.intermediate, l, t);
    return;
  }
  t->Add(p + "mlp.gate.weight", {c.experts, h}, HfShard::kReplicated, l);
  if (mtp ? c.fused_mtp_experts : c.fused_experts) {
    AddFusedExperts(c, p + "mlp.experts.", l, t);
  } else {
    AddExperts(c, p + "mlp.experts.", {"gate_proj", "up_proj", "down_proj"}, l,
               t);
  }
  if (c.shared_expert_intermediate > 0) {
    AddMlp(c, p + "mlp.shared_expert.", c.shared_expert_intermediate, l, t);
    t->Add(p + "mlp.shared_expert_gate.weight", {1, h}, HfShard::kReplicated,
           l);
  }
}

void AddHybridMtp(const HfConfig& c, TensorList* t) {
  if (c.mtp_layers == 0) return;
  const int64_t h = c.hidden, l = c.layers;  // the last stage's
  // fc's inputs are [embedding | hidden state]; vLLM splits its rows.
  t->Add("mtp.fc.weight", {h, 2 * h}, HfShard::kColumn, l);
  t->Add("mtp.pre_fc_norm_embedding.weight", {h}, HfShard::kReplicated, l);
  t->Add("mtp.pre_fc_norm_hidden.weight", {h}, HfShard::kReplicated, l);
  for (int64_t k = 0; k < c.mtp_layers; ++k) {
    AddHybridLayer(c, "mtp.layers." + std::to_string(k) + ".", l + k,
                   /*mtp=*/true, t);
  }
  t->Add("mtp.norm.weight", {h}, HfShard::kReplicated, l);
}

// Split as vLLM's tensor-parallel vision encoder: qkv by head within each
// of its q, k, v sections, proj and fc2 row-parallel, fc1 column-parallel;
// embeddings and norms whole. Row-parallel biases are whole.
void AddVisionTower(const HfConfig& c, TensorList* t) {
  if (!c.vision) return;
  const HfConfig::Vision& v = *c.vision;
  const int64_t d = v.hidden, m = d * v.merge * v.merge;
  const std::string x = "model.visual.";
  const auto whole = [&](const std::string& name, Dims shape) {
    t->Add(x + name, std::move(shape), HfShard::kReplicated, std::nullopt);
  };
  const auto split = [&](const std::string& name, Dims shape, HfShard s) {
    t->Add(x + name, std::move(shape), s, std::nullopt);
  };
  whole("patch_embed.proj.weight",
        {d, v.in_channels, v.temporal_patch, v.patch, v.patch});
  whole("patch_embed.proj.bias", {d});
  whole("pos_embed.weight", {v.positions, d});
  for (int64_t b = 0; b < v.depth; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    whole(p + "norm1.weight", {d});
    whole(p + "norm1.bias", {d});
    whole(p + "norm2.weight", {d});
    whole(p + "norm2.bias", {d});
    split(p + "attn.qkv.weight", {3 * d, d}, HfShard::kColumn);
    t->Sections({d, d, d});
    split(p + "attn.qkv.bias", {3 * d}, HfShard::kColumn);
    t->Sections({d, d, d});
    split(p + "attn.proj.weight", {d, d}, HfShard::kRow);
    whole(p + "attn.proj.bias", {d});
    split(p + "mlp.linear_fc1.weight", {v.intermediate, d}, HfShard::kColumn);
    split(p + "mlp.linear_fc1.bias", {v.intermediate}, HfShard::kColumn);
    split(p + "mlp.linear_fc2.weight", {d, v.intermediate}, HfShard::kRow);
    whole(p + "mlp.linear_fc2.bias", {d});
  }
  whole("merger.norm.weight", {d});
  whole("merger.norm.bias", {d});
  split("merger.linear_fc1.weight", {m, m}, HfShard::kColumn);
  split("merger.linear_fc1.bias", {m}, HfShard::kColumn);
  split("merger.linear_fc2.weight", {v.out_hidden, m}, HfShard::kRow);
  whole("merger.linear_fc2.bias", {v.out_hidden});
}

Status CheckHybridTp(const HfConfig& c, int64_t tp) {
  if (IsHybrid(c.arch) && c.lin_k_heads % tp != 0) {
    return Status::InvalidArgument(
        "TP " + std::to_string(tp) + " does not divide the " +
        std::to_string(c.lin_k_heads) + " linear-attention key heads of " +
        c.architecture);
  }
  if (c.vision &&
      (c.vision->heads % tp != 0 || c.vision->intermediate % tp != 0)) {
    return Status::InvalidArgument(
        "TP " + std::to_string(tp) + " does not divide the " +
        std::to_string(c.vision->heads) + " vision heads and the " +
        std::to_string(c.vision->intermediate) +
        " vision intermediate size of " + c.architecture);
  }
  return Status::OK();
}

}  // namespace reshard::internal
