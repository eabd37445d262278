// The Megatron-Core preset (docs/engines.md): GPTModel with the Transformer
// Engine layer spec, as named_parameters() of the unwrapped model names
// its parameters on each rank: stage-local layer numbers, linear_qkv
// interleaved per query group, fused layer norms, linear_fc1 = [gate_t;
// up_t], a padded vocabulary, TEGroupedMLP experts whole on their EP rank,
// MLA projections, DeepSeek's multi-token prediction on the last stage.

#include "engine/preset_common.h"
#include "engine/presets.h"

namespace reshard::internal {
namespace {

using Ep = TensorAxes::Ep;

// Megatron's expert grid (tp-ep-dp order, expert TP 1): the rank d * tp +
// t of a stage is EP rank (d * tp + t) % ep.
int64_t MegatronEp(const ParallelSizes& n, int64_t d, int64_t t) {
  return (d * n.tp + t) % n.ep;
}

class Megatron {
 public:
  Megatron(const HfConfig& c, const CanonTensors& canon,
           const EngineLayoutOptions& o, const EngineRelease& release)
      : c_(c),
        o_(o),
        n_(o.sizes),
        ranks_(GridRanks(n_, &MegatronEp)),
        b_(release.name, release.spec, n_, ranks_),
        w_(release.name, c, canon, &b_) {}

  Status Check();
  Result<EngineLayout> Run();

 private:
  Status Rank(const GridRank& r);
  // Decoder layer `i` (HF) as Megatron layer prefix `m`.
  Status Layer(const GridRank& r, int64_t i, const std::string& m);
  Status Gqa(const GridRank& r, const std::string& h, const std::string& m);
  Status Mla(const GridRank& r, const std::string& h, const std::string& m);
  Status Fc(const GridRank& r, const std::string& h, const std::string& m,
            int64_t width);
  Status Moe(const GridRank& r, const std::string& h, const std::string& m);
  Status Mtp(const GridRank& r, int64_t k);
  TensorAxes Split(int64_t dim) const { return {dim, 0, true, Ep::kCoupled}; }
  TensorAxes Replicated() const { return {-1, 0, true, Ep::kCoupled}; }
  const HfTensor* T(const std::string& name) const { return w_.Find(name); }

  const HfConfig& c_;
  const EngineLayoutOptions& o_;
  const ParallelSizes n_;
  std::vector<GridRank> ranks_;
  EngineBuilder b_;
  PresetWriter w_;
  int64_t vocab_chunk_ = 0;
};

Status Megatron::Check() {
  const std::string e = "megatron";
  if (c_.fp8) {
    return Status::InvalidArgument(
        e +
        " holds unquantized weights, but the model is block-FP8: lay "
        "it out with --dtype bfloat16 (and load with --convert), or use "
        "--engine vllm");
  }
  if ((n_.tp * n_.dp) % n_.ep != 0) {
    return Status::InvalidArgument(
        e + " places EP ranks over TP x DP: --ep " + std::to_string(n_.ep) +
        " must divide tp x dp = " + std::to_string(n_.tp * n_.dp));
  }
  if (n_.ep > 1 && c_.experts == 0) {
    return Status::InvalidArgument("EP " + std::to_string(n_.ep) +
                                   " needs routed experts; " + c_.architecture +
                                   " has none");
  }
  RESHARD_RETURN_NOT_OK(CheckFusedExpertsGrid(e, c_, n_));
  if (c_.experts > 0) {
    RESHARD_RETURN_NOT_OK(
        Divisible(e, "EP", n_.ep, "the routed experts", c_.experts));
  }
  RESHARD_RETURN_NOT_OK(Divisible(
      e, "PP", n_.pp, "num_hidden_layers (stages are even)", c_.layers));
  RESHARD_RETURN_NOT_OK(
      Divisible(e, "TP", n_.tp, "num_attention_heads", c_.heads));
  if (!UsesMla(c_.arch)) {
    RESHARD_RETURN_NOT_OK(Divisible(
        e, "TP", n_.tp, "num_key_value_heads (query groups)", c_.kv_heads));
  } else if (!c_.q_lora_rank) {
    return Status::Unimplemented(
        e +
        " preset: MLA without q_lora_rank (linear_q_proj) is not "
        "modelled");
  }
  if (c_.nextn_layers > 0 && c_.tie_word_embeddings && n_.pp > 1) {
    return Status::Unimplemented(
        e +
        " preset: tied embeddings with multi-token prediction over "
        "several stages are not modelled");
  }
  if (c_.arch == HfArch::kLlama && (c_.attention_bias || c_.mlp_bias)) {
    return Status::Unimplemented(e +
                                 " preset: Llama attention_bias and "
                                 "mlp_bias are not modelled");
  }
  RESHARD_RETURN_NOT_OK(
      Divisible(e, "TP", n_.tp, "intermediate_size", c_.intermediate));
  if (c_.shared_experts > 0) {
    RESHARD_RETURN_NOT_OK(Divisible(e, "TP", n_.tp,
                                    "the shared experts' intermediate size",
                                    c_.shared_experts * c_.moe_intermediate));
  }
  if (c_.nextn_layers > 0) {
    RESHARD_RETURN_NOT_OK(
        Divisible(e, "TP", n_.tp, "hidden_size (MTP eh_proj)", c_.hidden));
  }
  // The padded vocabulary is a tensor dimension: its multiple (times TP)
  // at most 2^31, as every dimension a config gives, and never overflowing.
  constexpr int64_t kMaxMultiple = int64_t{1} << 31;
  if (o_.make_vocab_size_divisible_by < 1 ||
      o_.make_vocab_size_divisible_by > kMaxMultiple / n_.tp) {
    return Status::InvalidArgument(
        "--make-vocab-size-divisible-by must be from 1 to " +
        std::to_string(kMaxMultiple / n_.tp) + " at TP " +
        std::to_string(n_.tp) + " (the padded vocabulary is at most 2^31 " +
        "rows), not " + std::to_string(o_.make_vocab_size_divisible_by));
  }
  RESHARD_ASSIGN_OR_RETURN(
      vocab_chunk_,
      VocabChunk(e, "model.embed_tokens.weight", c_.vocab,
                 o_.make_vocab_size_divisible_by * n_.tp, n_.tp,
                 " (a multiple of --make-vocab-size-divisible-by " +
                     std::to_string(o_.make_vocab_size_divisible_by) +
                     " x TP; a smaller multiple avoids it)",
                 PaddingRanks::kRefuse));
  return Status::OK();
}

Status Megatron::Gqa(const GridRank& r, const std::string& h,
                     const std::string& m) {
  const std::string a = h + "self_attn.";
  const std::string s = m + "self_attention.";
  const int64_t d = c_.head_dim, g = c_.kv_heads, qg = c_.heads / g;
  const int64_t gl = g / n_.tp;
  for (const char* kind : {"weight", "bias"}) {
    const HfTensor* q = T(a + "q_proj." + kind);
    if (q == nullptr) continue;
    std::vector<RowSlice> slices;
    for (int64_t k = r.t * gl; k < (r.t + 1) * gl; ++k) {
      slices.push_back({q, Split(0), k * qg * d, qg * d});
      slices.push_back({T(a + "k_proj." + kind), Split(0), k * d, d});
      slices.push_back({T(a + "v_proj." + kind), Split(0), k * d, d});
    }
    RESHARD_RETURN_NOT_OK(w_.Rows(s + "linear_qkv." + kind, slices));
  }
  RESHARD_RETURN_NOT_OK(w_.Whole(s + "linear_qkv.layer_norm_weight",
                                 h + "input_layernorm.weight", Replicated()));
  if (T(a + "q_norm.weight") != nullptr) {
    RESHARD_RETURN_NOT_OK(
        w_.Whole(s + "q_layernorm.weight", a + "q_norm.weight", Replicated()));
    RESHARD_RETURN_NOT_OK(
        w_.Whole(s + "k_layernorm.weight", a + "k_norm.weight", Replicated()));
  }
  const int64_t in = c_.heads * d;
  return w_.Cols(s + "linear_proj.weight", a + "o_proj.weight", Split(1),
                 r.t * in / n_.tp, in / n_.tp);
}

Status Megatron::Mla(const GridRank& r, const std::string& h,
                     const std::string& m) {
  const std::string a = h + "self_attn.";
  const std::string s = m + "self_attention.";
  const int64_t hl = c_.heads / n_.tp;
  const int64_t qh = c_.qk_nope + c_.qk_rope, kh = c_.qk_nope + c_.v_head;
  RESHARD_RETURN_NOT_OK(w_.Whole(m + "input_layernorm.weight",
                                 h + "input_layernorm.weight", Replicated()));
  RESHARD_RETURN_NOT_OK(w_.Whole(s + "linear_q_down_proj.weight",
                                 a + "q_a_proj.weight", Replicated()));
  RESHARD_RETURN_NOT_OK(w_.Whole(s + "linear_q_up_proj.layer_norm_weight",
                                 a + "q_a_layernorm.weight", Replicated()));
  RESHARD_RETURN_NOT_OK(
      w_.Rows(s + "linear_q_up_proj.weight",
              {{T(a + "q_b_proj.weight"), Split(0), r.t * hl * qh, hl * qh}}));
  RESHARD_RETURN_NOT_OK(w_.Whole(s + "linear_kv_down_proj.weight",
                                 a + "kv_a_proj_with_mqa.weight",
                                 Replicated()));
  RESHARD_RETURN_NOT_OK(w_.Whole(s + "linear_kv_up_proj.layer_norm_weight",
                                 a + "kv_a_layernorm.weight", Replicated()));
  RESHARD_RETURN_NOT_OK(
      w_.Rows(s + "linear_kv_up_proj.weight",
              {{T(a + "kv_b_proj.weight"), Split(0), r.t * hl * kh, hl * kh}}));
  const int64_t in = c_.heads * c_.v_head;
  return w_.Cols(s + "linear_proj.weight", a + "o_proj.weight", Split(1),
                 r.t * in / n_.tp, in / n_.tp);
}

// linear_fc1 = [gate chunk t; up chunk t], linear_fc2 = down's columns.
Status Megatron::Fc(const GridRank& r, const std::string& h,
                    const std::string& m, int64_t width) {
  const int64_t il = width / n_.tp;
  RESHARD_RETURN_NOT_OK(
      w_.Rows(m + "linear_fc1.weight",
              {{T(h + "gate_proj.weight"), Split(0), r.t * il, il},
               {T(h + "up_proj.weight"), Split(0), r.t * il, il}}));
  return w_.Cols(m + "linear_fc2.weight", h + "down_proj.weight", Split(1),
                 r.t * il, il);
}

Status Megatron::Moe(const GridRank& r, const std::string& h,
                     const std::string& m) {
  const bool mixtral = c_.arch == HfArch::kMixtral;
  // transformers 5's fused save (every expert of the layer in
  // mlp.experts.gate_up_proj and down_proj, Mixtral's block under mlp.
  // too), for the decoder and MTP layers alike.
  const bool fused = w_.canon().Find(h + "mlp.experts.gate_up_proj") != nullptr;
  const std::string hm = h + (mixtral && !fused ? "block_sparse_moe." : "mlp.");
  RESHARD_RETURN_NOT_OK(w_.Whole(m + "pre_mlp_layernorm.weight",
                                 h + "post_attention_layernorm.weight",
                                 Replicated()));
  RESHARD_RETURN_NOT_OK(
      w_.Whole(m + "mlp.router.weight", hm + "gate.weight", Replicated()));
  if (T(hm + "gate.e_score_correction_bias") != nullptr) {
    RESHARD_RETURN_NOT_OK(w_.Whole(m + "mlp.router.expert_bias",
                                   hm + "gate.e_score_correction_bias",
                                   Replicated()));
  }
  const int64_t local = c_.experts / n_.ep, il = c_.moe_intermediate;
  const TensorAxes owned{-1, 0, true, Ep::kOwned};
  const char* g = mixtral ? "w1" : "gate_proj";
  const char* u = mixtral ? "w3" : "up_proj";
  const char* dn = mixtral ? "w2" : "down_proj";
  for (int64_t i = 0; i < local; ++i) {
    const std::string x =
        hm + "experts." + std::to_string(r.e * local + i) + ".";
    const std::string n = std::to_string(i);
    if (fused) {
      RESHARD_RETURN_NOT_OK(w_.FusedExperts(
          m + "mlp.experts.linear_fc1.weight" + n,
          m + "mlp.experts.linear_fc2.weight" + n, hm + "experts.",
          r.e * local + i, 1, 0, il, /*tp_split=*/false, /*stacked=*/false));
      continue;
    }
    RESHARD_RETURN_NOT_OK(w_.Rows(m + "mlp.experts.linear_fc1.weight" + n,
                                  {{T(x + g + ".weight"), owned, 0, il},
                                   {T(x + u + ".weight"), owned, 0, il}}));
    RESHARD_RETURN_NOT_OK(w_.Whole(m + "mlp.experts.linear_fc2.weight" + n,
                                   x + dn + ".weight", owned));
  }
  if (c_.shared_experts > 0) {
    RESHARD_RETURN_NOT_OK(Fc(r, hm + "shared_experts.",
                             m + "mlp.shared_experts.",
                             c_.shared_experts * c_.moe_intermediate));
  }
  return Status::OK();
}

Status Megatron::Layer(const GridRank& r, int64_t i, const std::string& m) {
  const std::string h = "model.layers." + std::to_string(i) + ".";
  RESHARD_RETURN_NOT_OK(UsesMla(c_.arch) ? Mla(r, h, m) : Gqa(r, h, m));
  if (IsSparseLayer(c_, i)) return Moe(r, h, m);
  RESHARD_RETURN_NOT_OK(w_.Whole(m + "mlp.linear_fc1.layer_norm_weight",
                                 h + "post_attention_layernorm.weight",
                                 Replicated()));
  return Fc(r, h + "mlp.", m + "mlp.", c_.intermediate);
}

// MTP layer k (HF layer L + k) on the last stage.
Status Megatron::Mtp(const GridRank& r, int64_t k) {
  const std::string h = "model.layers." + std::to_string(c_.layers + k) + ".";
  const std::string m = "mtp.layers." + std::to_string(k) + ".";
  RESHARD_RETURN_NOT_OK(
      w_.Whole(m + "enorm.weight", h + "enorm.weight", Replicated()));
  RESHARD_RETURN_NOT_OK(
      w_.Whole(m + "hnorm.weight", h + "hnorm.weight", Replicated()));
  const int64_t hl = c_.hidden / n_.tp;
  RESHARD_RETURN_NOT_OK(
      w_.Rows(m + "eh_proj.weight",
              {{T(h + "eh_proj.weight"), Split(0), r.t * hl, hl}}));
  RESHARD_RETURN_NOT_OK(Layer(r, c_.layers + k, m + "mtp_model_layer."));
  return w_.Whole(m + "final_layernorm.weight", h + "shared_head.norm.weight",
                  Replicated());
}

Status Megatron::Rank(const GridRank& r) {
  const bool first = r.p == 0, last = r.p == n_.pp - 1;
  const int64_t row0 = r.t * vocab_chunk_;
  const bool mtp = c_.nextn_layers > 0;
  if (first || (last && mtp)) {
    RESHARD_RETURN_NOT_OK(w_.Vocab("embedding.word_embeddings.weight",
                                   "model.embed_tokens.weight", Split(0), row0,
                                   vocab_chunk_));
  }
  const int64_t per = c_.layers / n_.pp;
  for (int64_t j = 0; j < per; ++j) {
    RESHARD_RETURN_NOT_OK(
        Layer(r, r.p * per + j, "decoder.layers." + std::to_string(j) + "."));
  }
  if (!last) return Status::OK();
  RESHARD_RETURN_NOT_OK(w_.Whole("decoder.final_layernorm.weight",
                                 "model.norm.weight", Replicated()));
  if (!c_.tie_word_embeddings || n_.pp > 1) {
    const char* head =
        c_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    RESHARD_RETURN_NOT_OK(
        w_.Vocab("output_layer.weight", head, Split(0), row0, vocab_chunk_));
  }
  for (int64_t k = 0; k < c_.nextn_layers; ++k) {
    RESHARD_RETURN_NOT_OK(Mtp(r, k));
  }
  return Status::OK();
}

Result<EngineLayout> Megatron::Run() {
  RESHARD_RETURN_NOT_OK(Check());
  return BuildRanks(
      ranks_, &b_, &w_, [this](const GridRank& r) { return Rank(r); }, c_, o_);
}

}  // namespace

Result<EngineLayout> MegatronLayout(const HfConfig& config,
                                    const CanonTensors& canon,
                                    const EngineLayoutOptions& options,
                                    const EngineRelease& release) {
  RESHARD_RETURN_NOT_OK(CheckArchitecture(
      config, options,
      {HfArch::kLlama, HfArch::kQwen2, HfArch::kQwen3, HfArch::kQwen3Moe,
       HfArch::kMixtral, HfArch::kDeepseekV3}));
  return Megatron(config, canon, options, release).Run();
}

}  // namespace reshard::internal
