// The vLLM preset for the hybrid models (docs/engines.md): what each vLLM
// 0.33 rank holds after load_weights for Qwen3-Next (Qwen3NextForCausalLM)
// and Qwen3.5's text classes (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM),
// in named_parameters() order.
//
// Per decoder layer: the gated DeltaNet (linear_attn: dt_bias, A_log in
// float32 whatever the model dtype, conv1d split section by section over
// [q | k | v], in_proj_qkvz, in_proj_ba, norm, out_proj) or the gated full
// attention (self_attn.qkv_proj whose q rows hold each head's queries and
// gate), then the MLP or the sparse MoE block (gate, shared_expert_gate,
// shared_expert, experts.routed_experts), then the two norms. Both models
// build the embedding on every pipeline stage, Qwen3-Next its LM head too;
// the MTP layers (mtp.*) belong to vLLM's draft model and are not loaded.

#include "engine/preset_common.h"
#include "engine/presets.h"
#include "engine/vllm_common.h"

namespace reshard::internal {
namespace {

class VllmHybrid : private VllmPresetBase {
 public:
  VllmHybrid(const HfConfig& c, const CanonTensors& canon,
             const EngineLayoutOptions& o, const EngineRelease& release)
      : VllmPresetBase(c, canon, o, release) {}

  Result<EngineLayout> Run();

 private:
  Status Check();
  Status CheckTp();
  Status Rank(const GridRank& r);
  Status LinearAttention(const GridRank& r, const std::string& a);
  Status FullAttention(const GridRank& r, const std::string& a);
  // gate_up_proj and down_proj of an MLP of `width`, split over TP unless
  // `whole`.
  Status Mlp(const GridRank& r, const std::string& p, int64_t width,
             bool whole);
  Status Moe(const GridRank& r, const std::string& m);
  bool Next() const { return c_.arch == HfArch::kQwen3Next; }
  // vLLM builds the shared expert whole on every rank under
  // sequence-parallel MoE (VllmSequenceParallelMoe, set by Check).
  bool SequenceParallelMoe() const { return sp_moe_; }
};

Status VllmHybrid::CheckTp() {
  const std::string& e = release_.name;
  RESHARD_RETURN_NOT_OK(CheckAttentionHeads());
  // The DeltaNet: vLLM splits its key and value dimensions (conv1d's
  // sections, in_proj_qkvz) and its value heads (A_log, dt_bias), not its
  // key heads: at TP 4 with 2 key heads each rank holds half of one, a
  // contiguous box of Qwen3-Next's interleaved in_proj_qkvz.
  RESHARD_RETURN_NOT_OK(Divisible(e, "TP", n_.tp,
                                  "linear_num_key_heads * linear_key_head_dim",
                                  c_.lin_k_heads * c_.lin_k_dim));
  RESHARD_RETURN_NOT_OK(
      Divisible(e, "TP", n_.tp, "linear_num_value_heads", c_.lin_v_heads));
  bool dense = c_.experts == 0;
  for (int64_t l = 0; l < c_.layers && !dense; ++l) {
    dense = !IsSparseLayer(c_, l);
  }
  if (dense) {
    RESHARD_RETURN_NOT_OK(
        Divisible(e, "TP", n_.tp, "intermediate_size", c_.intermediate));
  }
  if (c_.experts == 0) return Status::OK();
  if (n_.tp > c_.experts) {
    return Status::InvalidArgument(e + " refuses TP " + std::to_string(n_.tp) +
                                   " above the " + std::to_string(c_.experts) +
                                   " experts of " + c_.architecture);
  }
  if (n_.ep == 1) {
    // Without EP FusedMoE flattens TP across DP: dp x tp ranks split every
    // expert.
    RESHARD_RETURN_NOT_OK(Divisible(e, n_.dp > 1 ? "DP x TP" : "TP",
                                    n_.dp * n_.tp, "moe_intermediate_size",
                                    c_.moe_intermediate));
  }
  if (!SequenceParallelMoe()) {
    RESHARD_RETURN_NOT_OK(Divisible(e, "TP", n_.tp,
                                    "shared_expert_intermediate_size",
                                    c_.shared_expert_intermediate));
  }
  return Status::OK();
}

Status VllmHybrid::Check() {
  const std::string& e = release_.name;
  // Qwen3-Next came with vLLM 0.10.2, Qwen3.5 later.
  if (release_.spec == "vllm@<0.10.2") {
    return Status::Unimplemented("engine " + release_.spec + " has no " +
                                 c_.architecture);
  }
  if (c_.lm_prefix != "model.") {
    return Status::Unimplemented(
        "engine preset " + e +
        " lays out the text classes of Qwen3.5 "
        "(Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM), not " +
        c_.architecture + " (its language model under " + c_.lm_prefix + ")");
  }
  if (c_.fp8 || c_.fp8_channel) {
    return Status::Unimplemented("engine preset " + e +
                                 " does not lay out FP8 " + c_.architecture);
  }
  RESHARD_RETURN_NOT_OK(CheckExpertGrid());
  if (c_.experts > 0 && c_.shared_expert_intermediate == 0) {
    return Status::InvalidArgument(
        e + " builds every sparse block of " + c_.architecture +
        " with a shared expert and its gate: "
        "shared_expert_intermediate_size must be positive");
  }
  RESHARD_RETURN_NOT_OK(CheckTp());
  RESHARD_RETURN_NOT_OK(CheckStages());
  // vLLM's Qwen3-Next never ties its head: a tied config loads only from
  // a checkpoint that stores lm_head.weight.
  if (Next() && T("lm_head.weight") == nullptr) {
    return Status::InvalidArgument(
        e + " holds lm_head.weight apart from the embedding in " +
        c_.architecture +
        " (tie_word_embeddings is not followed): the checkpoint must store "
        "lm_head.weight");
  }
  RESHARD_RETURN_NOT_OK(SetVocabChunk());
  return Status::OK();
}

Status VllmHybrid::LinearAttention(const GridRank& r, const std::string& a) {
  const int64_t k = c_.lin_k_heads * c_.lin_k_dim;
  const int64_t v = c_.lin_v_heads * c_.lin_v_dim;
  const int64_t kl = k / n_.tp, vl = v / n_.tp, hl = c_.lin_v_heads / n_.tp;
  const int64_t t = r.t;
  // The module's own parameters come before its submodules'.
  RESHARD_RETURN_NOT_OK(
      w_.Rows(a + "dt_bias", {{T(a + "dt_bias"), Split(0), t * hl, hl}}));
  // A_log is float32 whatever the model dtype (HoldsFloat32: the
  // canonical tensor is float32 here, and a 16-bit checkpoint's widens).
  RESHARD_RETURN_NOT_OK(
      w_.Rows(a + "A_log", {{T(a + "A_log"), Split(0), t * hl, hl}}));
  // conv1d's channels are [q | k | v], each section split on its own
  // (mamba_v2_sharded_weight_loader).
  const HfTensor* conv = T(a + "conv1d.weight");
  RESHARD_RETURN_NOT_OK(
      w_.Rows(a + "conv1d.weight", {{conv, Split(0), t * kl, kl},
                                    {conv, Split(0), k + t * kl, kl},
                                    {conv, Split(0), 2 * k + t * vl, vl}}));
  if (Next()) {
    // One output shard each: contiguous rows (whole key-head groups, or
    // part of one when TP exceeds the key heads).
    const int64_t qkvz = (2 * k + 2 * v) / n_.tp;
    const int64_t ba = 2 * c_.lin_v_heads / n_.tp;
    RESHARD_RETURN_NOT_OK(
        w_.Rows(a + "in_proj_qkvz.weight",
                {{T(a + "in_proj_qkvz.weight"), Split(0), t * qkvz, qkvz}}));
    RESHARD_RETURN_NOT_OK(
        w_.Rows(a + "in_proj_ba.weight",
                {{T(a + "in_proj_ba.weight"), Split(0), t * ba, ba}}));
  } else {
    // Output shards [q, k, v, z] and [b, a], each split on its own.
    const HfTensor* qkv = T(a + "in_proj_qkv.weight");
    RESHARD_RETURN_NOT_OK(
        w_.Rows(a + "in_proj_qkvz.weight",
                {{qkv, Split(0), t * kl, kl},
                 {qkv, Split(0), k + t * kl, kl},
                 {qkv, Split(0), 2 * k + t * vl, vl},
                 {T(a + "in_proj_z.weight"), Split(0), t * vl, vl}}));
    RESHARD_RETURN_NOT_OK(
        w_.Rows(a + "in_proj_ba.weight",
                {{T(a + "in_proj_b.weight"), Split(0), t * hl, hl},
                 {T(a + "in_proj_a.weight"), Split(0), t * hl, hl}}));
  }
  RESHARD_RETURN_NOT_OK(
      w_.Whole(a + "norm.weight", a + "norm.weight", Replicated()));
  return w_.Cols(a + "out_proj.weight", a + "out_proj.weight", Split(1), t * vl,
                 vl);
}

Status VllmHybrid::FullAttention(const GridRank& r, const std::string& a) {
  const int64_t d = c_.head_dim, hl = c_.heads / n_.tp;
  // q_proj's rows are, head by head, the head's queries then its gate:
  // QKVParallelLinear over heads * (1 + attn_output_gate) query heads.
  const int64_t ql = hl * d * (c_.attn_gate ? 2 : 1);
  const int64_t kvr = std::max<int64_t>(1, c_.kv_heads / n_.tp);
  const int64_t s = c_.kv_heads >= n_.tp ? r.t : r.t / (n_.tp / c_.kv_heads);
  TensorAxes kv = Split(0);
  if (c_.kv_heads < n_.tp) kv.tp_shards = c_.kv_heads;
  RESHARD_RETURN_NOT_OK(
      w_.Rows(a + "qkv_proj.weight",
              {{T(a + "q_proj.weight"), Split(0), r.t * ql, ql},
               {T(a + "k_proj.weight"), kv, s * kvr * d, kvr * d},
               {T(a + "v_proj.weight"), kv, s * kvr * d, kvr * d}}));
  const int64_t in = c_.heads * d;
  RESHARD_RETURN_NOT_OK(w_.Cols(a + "o_proj.weight", a + "o_proj.weight",
                                Split(1), r.t * in / n_.tp, in / n_.tp));
  for (const char* name : {"q_norm.weight", "k_norm.weight"}) {
    RESHARD_RETURN_NOT_OK(w_.Whole(a + name, a + name, Replicated()));
  }
  return Status::OK();
}

Status VllmHybrid::Mlp(const GridRank& r, const std::string& p, int64_t width,
                       bool whole) {
  const int64_t il = whole ? width : width / n_.tp;
  const int64_t row0 = whole ? 0 : r.t * il;
  const TensorAxes rows = whole ? Replicated() : Split(0);
  const TensorAxes cols = whole ? Replicated() : Split(1);
  RESHARD_RETURN_NOT_OK(w_.Rows(p + "gate_up_proj.weight",
                                {{T(p + "gate_proj.weight"), rows, row0, il},
                                 {T(p + "up_proj.weight"), rows, row0, il}}));
  return w_.Cols(p + "down_proj.weight", p + "down_proj.weight", cols, row0,
                 il);
}

Status VllmHybrid::Moe(const GridRank& r, const std::string& m) {
  RESHARD_RETURN_NOT_OK(
      w_.Whole(m + "gate.weight", m + "gate.weight", Replicated()));
  RESHARD_RETURN_NOT_OK(w_.Whole(m + "shared_expert_gate.weight",
                                 m + "shared_expert_gate.weight",
                                 Replicated()));
  RESHARD_RETURN_NOT_OK(Mlp(r, m + "shared_expert.",
                            c_.shared_expert_intermediate,
                            SequenceParallelMoe()));
  // FP8 models are refused by Check: the experts hold no scales.
  return RoutedExperts(ExpertsOf(r), m + Experts(), m + "experts.", "gate_proj",
                       "up_proj", "down_proj",
                       [](const std::string&) { return Status::OK(); });
}

Status VllmHybrid::Rank(const GridRank& r) {
  const bool last = r.p == n_.pp - 1;
  const int64_t row0 = r.t * vocab_chunk_;
  // VocabParallelEmbedding (and Qwen3-Next's ParallelLMHead) are built on
  // every stage and loaded there.
  RESHARD_RETURN_NOT_OK(w_.Vocab("model.embed_tokens.weight",
                                 "model.embed_tokens.weight", Split(0, false),
                                 row0, vocab_chunk_));
  const auto [lo, hi] = Stage(r.p);
  for (int64_t i = lo; i < hi; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    RESHARD_RETURN_NOT_OK(c_.linear_layers[static_cast<size_t>(i)]
                              ? LinearAttention(r, p + "linear_attn.")
                              : FullAttention(r, p + "self_attn."));
    RESHARD_RETURN_NOT_OK(IsSparseLayer(c_, i)
                              ? Moe(r, p + "mlp.")
                              : Mlp(r, p + "mlp.", c_.intermediate, false));
    for (const char* norm :
         {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
      RESHARD_RETURN_NOT_OK(w_.Whole(p + norm, p + norm, Replicated()));
    }
  }
  if (last) {
    RESHARD_RETURN_NOT_OK(
        w_.Whole("model.norm.weight", "model.norm.weight", Replicated()));
  }
  // Qwen3.5's head lives on the last stage and is the embedding when tied.
  if (Next() || (last && !c_.tie_word_embeddings)) {
    RESHARD_RETURN_NOT_OK(w_.Vocab("lm_head.weight", "lm_head.weight",
                                   Split(0, !Next()), row0, vocab_chunk_));
  }
  return Status::OK();
}

Result<EngineLayout> VllmHybrid::Run() {
  RESHARD_RETURN_NOT_OK(Check());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    w_.SetRank(i);
    RESHARD_RETURN_NOT_OK(Rank(ranks_[i]));
  }
  return b_.Build(c_, o_);
}

}  // namespace

Result<EngineLayout> VllmHybridLayout(const HfConfig& config,
                                      const CanonTensors& canon,
                                      const EngineLayoutOptions& options,
                                      const EngineRelease& release) {
  RESHARD_RETURN_NOT_OK(CheckArchitecture(
      config, options,
      {HfArch::kQwen3Next, HfArch::kQwen35, HfArch::kQwen35Moe}));
  return VllmHybrid(config, canon, options, release).Run();
}

}  // namespace reshard::internal
