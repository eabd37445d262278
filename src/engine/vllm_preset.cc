// The vLLM preset (docs/engines.md): what each vLLM rank holds after
// load_weights, for Llama (and Mistral), Qwen2, Qwen3, Qwen3-MoE, Mixtral
// DeepSeek-V2/V3 and GLM-4.5, block-FP8 included.

#include <cstring>
#include <numeric>

#include "engine/preset_common.h"
#include "engine/presets.h"
#include "engine/vllm_common.h"
#include "util/float_convert.h"

namespace reshard::internal {
namespace {

// The bytes of -1.0 in float dtype `dtype` (memory order): what vLLM's
// KV-cache scale parameters hold until a checkpoint's scales replace them.
Result<std::string> MinusOne(const std::string& dtype) {
  std::string out;
  auto put = [&out](const auto& v) {
    out.resize(sizeof(v));
    std::memcpy(out.data(), &v, sizeof(v));
  };
  if (dtype == "float32") {
    put(-1.0f);
  } else if (dtype == "float64") {
    put(-1.0);
  } else if (dtype == "bfloat16") {
    put(internal::FloatToBFloat16(-1.0f));
  } else if (dtype == "float16") {
    put(internal::FloatToFloat16(-1.0f));
  } else {
    return Status::InvalidArgument(
        "vllm holds its KV-cache scales in the model dtype, which is " + dtype +
        " here, not a float dtype");
  }
  return out;
}

class Vllm : private VllmPresetBase {
 public:
  Vllm(const HfConfig& c, const CanonTensors& canon,
       const EngineLayoutOptions& o, const EngineRelease& release)
      : VllmPresetBase(c, canon, o, release) {}

  Status Check();
  Result<EngineLayout> Run();

 private:
  Status Rank(const GridRank& r);
  Status Attention(const GridRank& r, const std::string& p);
  // vLLM's KV-cache scales of the attention of layer prefix `p` (after its
  // linear layers), where the release and quant config give them.
  Status KvCacheScales(const std::string& p);
  Status Mla(const GridRank& r, const std::string& p);
  // A dense MLP of `width` rows, TP-split; whole on every rank with
  // `whole` (shared experts under sequence-parallel MoE, disable_tp).
  Status Mlp(const GridRank& r, const std::string& p, int64_t width,
             bool whole = false);
  Status Moe(const GridRank& r, const std::string& p);
  // What vLLM's Fp8MoEMethod does with block-FP8 experts of which each
  // rank holds rows [row0, row0 + il) (parameter `name`): holds them as the
  // checkpoint's blocks (OK), refines the blocks (refine_fp8_moe_block_shape;
  // refused here, not modelled) or refuses them (validate_fp8_block_shape_moe).
  Status Fp8Experts(const std::string& name, int64_t row0, int64_t il) const;
  // Qwen3-MoE and Mixtral keep embedding, norm and head on every stage.
  bool EveryStage() const {
    return c_.arch == HfArch::kQwen3Moe || c_.arch == HfArch::kMixtral;
  }
};

Status Vllm::Check() {
  const std::string& e = release_.name;
  RESHARD_RETURN_NOT_OK(CheckExpertGrid());
  if (c_.arch == HfArch::kQwen3Moe && n_.tp > c_.experts) {
    return Status::InvalidArgument(e + " refuses TP " + std::to_string(n_.tp) +
                                   " above the " + std::to_string(c_.experts) +
                                   " experts of Qwen3-MoE");
  }
  if (UsesMla(c_.arch)) {
    RESHARD_RETURN_NOT_OK(
        Divisible(e, "TP", n_.tp, "num_attention_heads", c_.heads));
  } else {
    RESHARD_RETURN_NOT_OK(CheckAttentionHeads());
  }
  RESHARD_RETURN_NOT_OK(
      Divisible(e, "TP", n_.tp, "intermediate_size", c_.intermediate));
  if (c_.experts > 0 && n_.ep == 1) {
    // Without EP FusedMoE flattens TP across DP: dp x tp ranks split every
    // expert.
    RESHARD_RETURN_NOT_OK(Divisible(e, n_.dp > 1 ? "DP x TP" : "TP",
                                    n_.dp * n_.tp, "moe_intermediate_size",
                                    c_.moe_intermediate));
  }
  RESHARD_RETURN_NOT_OK(CheckStages());
  RESHARD_RETURN_NOT_OK(SetVocabChunk());
  return Status::OK();
}

Status Vllm::Attention(const GridRank& r, const std::string& p) {
  const std::string a = p + "self_attn.";
  const int64_t d = c_.head_dim, hl = c_.heads / n_.tp;
  const int64_t kvr = std::max<int64_t>(1, c_.kv_heads / n_.tp);
  const int64_t s = c_.kv_heads >= n_.tp ? r.t : r.t / (n_.tp / c_.kv_heads);
  TensorAxes kv = Split(0);
  if (c_.kv_heads < n_.tp) kv.tp_shards = c_.kv_heads;
  for (const char* kind : {"weight", "bias"}) {
    const HfTensor* q = T(a + "q_proj." + kind);
    if (q == nullptr) continue;
    RESHARD_RETURN_NOT_OK(
        w_.Rows(a + "qkv_proj." + kind,
                {{q, Split(0), r.t * hl * d, hl * d},
                 {T(a + "k_proj." + kind), kv, s * kvr * d, kvr * d},
                 {T(a + "v_proj." + kind), kv, s * kvr * d, kvr * d}}));
  }
  const int64_t in = c_.heads * d;
  RESHARD_RETURN_NOT_OK(w_.Cols(a + "o_proj.weight", a + "o_proj.weight",
                                Split(1), r.t * in / n_.tp, in / n_.tp));
  if (T(a + "o_proj.bias") != nullptr) {
    RESHARD_RETURN_NOT_OK(
        w_.Whole(a + "o_proj.bias", a + "o_proj.bias", Replicated()));
  }
  // Registration order: Qwen2Attention builds its (optional) norms before
  // its Attention module, Qwen3's after; Llama and Mixtral have none.
  const bool norms_first = c_.arch == HfArch::kQwen2;
  if (!norms_first) RESHARD_RETURN_NOT_OK(KvCacheScales(p));
  for (const char* name : {"q_norm.weight", "k_norm.weight"}) {
    if (T(a + name) != nullptr) {
      RESHARD_RETURN_NOT_OK(w_.Whole(a + name, a + name, Replicated()));
    }
  }
  if (norms_first) RESHARD_RETURN_NOT_OK(KvCacheScales(p));
  return Status::OK();
}

Status Vllm::KvCacheScales(const std::string& p) {
  // Fp8Config gives every Attention module (not MLAAttention, which
  // DeepSeek's MLA layers build) BaseKVCacheMethod, whose create_weights
  // registers four 0-dim parameters of the default dtype (the model dtype
  // while vLLM builds the model), each -1.0; load_weights leaves them so
  // when the checkpoint holds no KV-cache scales.
  if (!release_.kv_cache_scales || !c_.fp8) return Status::OK();
  RESHARD_ASSIGN_OR_RETURN(const HfTensor* norm,
                           w_.Get(p + "input_layernorm.weight"));
  RESHARD_ASSIGN_OR_RETURN(std::string fill, MinusOne(norm->dtype));
  for (const char* name : {"q_scale", "k_scale", "v_scale", "prob_scale"}) {
    RESHARD_RETURN_NOT_OK(
        w_.Fill(p + "self_attn.attn." + name, {}, norm->dtype, fill));
  }
  return Status::OK();
}

Status Vllm::Mla(const GridRank& r, const std::string& p) {
  const std::string a = p + "self_attn.";
  const int64_t hl = c_.heads / n_.tp;
  RESHARD_ASSIGN_OR_RETURN(const HfTensor* kv_a,
                           w_.Get(a + "kv_a_proj_with_mqa.weight"));
  if (c_.q_lora_rank) {
    RESHARD_ASSIGN_OR_RETURN(const HfTensor* q_a,
                             w_.Get(a + "q_a_proj.weight"));
    RESHARD_RETURN_NOT_OK(w_.Rows(a + "fused_qkv_a_proj.weight",
                                  {{q_a, Replicated(), 0, q_a->shape[0]},
                                   {kv_a, Replicated(), 0, kv_a->shape[0]}}));
    RESHARD_RETURN_NOT_OK(w_.Whole(a + "q_a_layernorm.weight",
                                   a + "q_a_layernorm.weight", Replicated()));
    const int64_t qh = c_.qk_nope + c_.qk_rope;
    RESHARD_RETURN_NOT_OK(w_.Rows(
        a + "q_b_proj.weight",
        {{T(a + "q_b_proj.weight"), Split(0), r.t * hl * qh, hl * qh}}));
  } else {
    // DeepseekV2MLAAttention registers kv_a_proj_with_mqa before q_proj.
    const int64_t qh = c_.qk_nope + c_.qk_rope;
    RESHARD_RETURN_NOT_OK(
        w_.Whole(a + "kv_a_proj_with_mqa.weight", kv_a->name, Replicated()));
    RESHARD_RETURN_NOT_OK(
        w_.Rows(a + "q_proj.weight",
                {{T(a + "q_proj.weight"), Split(0), r.t * hl * qh, hl * qh}}));
  }
  RESHARD_RETURN_NOT_OK(w_.Whole(a + "kv_a_layernorm.weight",
                                 a + "kv_a_layernorm.weight", Replicated()));
  const int64_t kh = c_.qk_nope + c_.v_head;
  RESHARD_RETURN_NOT_OK(
      w_.Rows(a + "kv_b_proj.weight",
              {{T(a + "kv_b_proj.weight"), Split(0), r.t * hl * kh, hl * kh}}));
  const int64_t in = c_.heads * c_.v_head;
  return w_.Cols(a + "o_proj.weight", a + "o_proj.weight", Split(1),
                 r.t * in / n_.tp, in / n_.tp);
}

Status Vllm::Mlp(const GridRank& r, const std::string& p, int64_t width,
                 bool whole) {
  const int64_t il = whole ? width : width / n_.tp;
  const int64_t row0 = whole ? 0 : r.t * il;
  const TensorAxes rows = whole ? Replicated() : Split(0);
  for (const char* kind : {"weight", "bias"}) {
    const HfTensor* gate = T(p + "gate_proj." + kind);
    if (gate == nullptr) continue;
    RESHARD_RETURN_NOT_OK(w_.Rows(
        p + "gate_up_proj." + kind,
        {{gate, rows, row0, il}, {T(p + "up_proj." + kind), rows, row0, il}}));
  }
  RESHARD_RETURN_NOT_OK(w_.Cols(p + "down_proj.weight", p + "down_proj.weight",
                                whole ? Replicated() : Split(1), row0, il));
  if (T(p + "down_proj.bias") != nullptr) {
    return w_.Whole(p + "down_proj.bias", p + "down_proj.bias", Replicated());
  }
  return Status::OK();
}

Status Vllm::Fp8Experts(const std::string& name, int64_t row0,
                        int64_t il) const {
  const int64_t bn = c_.block_rows, bk = c_.block_cols;
  // FusedMoE's TP: DP x TP without EP (it flattens TP across DP), 1 with
  // EP, where every expert is whole.
  const int64_t moe_tp = n_.ep > 1 ? 1 : n_.dp * n_.tp;
  const std::string rows =
      "[" + std::to_string(row0) + ", " + std::to_string(row0 + il) + ")";
  const std::string shard =
      il % bn != 0
          ? name + ": it holds rows " + rows +
                " of every expert's gate_proj and up_proj, not whole " +
                std::to_string(bn) + "-row blocks of their weight_scale_inv"
          : name + ": its w2_weight holds columns " + rows +
                " of every expert's down_proj, not whole " +
                std::to_string(bk) + "-column blocks of its weight_scale_inv";
  if (!(il % bn == 0 && (moe_tp == 1 || il % bk == 0))) {
    const int64_t refine = std::gcd(std::gcd(bn, bk), std::gcd(il, c_.hidden));
    if (refine >= 32) {
      // Each stored scale then covers (bn / refine) x (bk / refine) refined
      // blocks and is repeated into every one of them (repeat_interleave):
      // a parameter no box copy of the scale tensor fills.
      const int64_t all = c_.moe_intermediate;
      const bool ep_whole = all % bn == 0 && all % bk == 0;
      return Status::Unimplemented(
          "the " + release_.name + " preset does not lay out " +
          ("block-FP8 experts " + shard) +
          "; vLLM 0.33 loads them with its MoE scale blocks refined to " +
          std::to_string(refine) + "x" + std::to_string(refine) +
          " (refine_fp8_moe_block_shape), each stored weight_scale_inv "
          "value repeated over the " +
          std::to_string(bn / refine) + "x" + std::to_string(bk / refine) +
          " refined blocks it covers, which reshard does not model (a "
          "parameter's pieces are boxes of the checkpoint's tensors)" +
          (ep_whole
               ? "; expert parallelism (--ep " + std::to_string(n_.tp * n_.dp) +
                     ") keeps every expert whole"
               : std::string()));
    }
  }
  if (il % bn != 0 || (moe_tp > 1 && il % bk != 0)) {
    return Status::InvalidArgument(
        release_.name + " refuses block-FP8 experts " + shard +
        " (as vLLM does: validate_fp8_block_shape_moe, no refined block of "
        "32 or more divides them)");
  }
  return Status::OK();
}

Status Vllm::Moe(const GridRank& r, const std::string& p) {
  const bool mixtral = c_.arch == HfArch::kMixtral;
  const std::string m = p + (mixtral ? "block_sparse_moe." : "mlp.");
  // transformers 5's fused save keeps Mixtral's block under mlp.
  const std::string hm = c_.fused_experts ? p + "mlp." : m;
  RESHARD_RETURN_NOT_OK(
      w_.Whole(m + "gate.weight", hm + "gate.weight", Replicated()));
  if (T(hm + "gate.e_score_correction_bias") != nullptr) {
    RESHARD_RETURN_NOT_OK(w_.Whole(m + "gate.e_score_correction_bias",
                                   hm + "gate.e_score_correction_bias",
                                   Replicated()));
  }
  if (c_.shared_experts > 0) {
    RESHARD_RETURN_NOT_OK(Mlp(r, m + "shared_experts.",
                              c_.shared_experts * c_.moe_intermediate,
                              sp_moe_));
  }
  // vLLM 0.33's FusedMoE keeps its parameters in its routed_experts
  // submodule.
  const ExpertShare s = ExpertsOf(r);
  return RoutedExperts(
      s, m + Experts(), hm + "experts.", mixtral ? "w1" : "gate_proj",
      mixtral ? "w3" : "up_proj", mixtral ? "w2" : "down_proj",
      [&](const std::string& w13) { return Fp8Experts(w13, s.row0, s.il); });
}

Status Vllm::Rank(const GridRank& r) {
  const bool first = r.p == 0, last = r.p == n_.pp - 1;
  const bool every = EveryStage(), tied = c_.tie_word_embeddings;
  const int64_t row0 = r.t * vocab_chunk_;
  if (first || every || (tied && last)) {
    RESHARD_RETURN_NOT_OK(w_.Vocab("model.embed_tokens.weight",
                                   "model.embed_tokens.weight",
                                   Split(0, !every), row0, vocab_chunk_));
  }
  const auto [lo, hi] = Stage(r.p);
  for (int64_t i = lo; i < hi; ++i) {
    // named_parameters() order: the decoder layers register self_attn,
    // mlp, input_layernorm, post_attention_layernorm.
    const std::string p = "model.layers." + std::to_string(i) + ".";
    RESHARD_RETURN_NOT_OK(UsesMla(c_.arch) ? Mla(r, p) : Attention(r, p));
    RESHARD_RETURN_NOT_OK(
        IsSparseLayer(c_, i) ? Moe(r, p) : Mlp(r, p + "mlp.", c_.intermediate));
    RESHARD_RETURN_NOT_OK(w_.Whole(p + "input_layernorm.weight",
                                   p + "input_layernorm.weight", Replicated()));
    RESHARD_RETURN_NOT_OK(w_.Whole(p + "post_attention_layernorm.weight",
                                   p + "post_attention_layernorm.weight",
                                   Replicated()));
  }
  if (last || every) {
    RESHARD_RETURN_NOT_OK(
        w_.Whole("model.norm.weight", "model.norm.weight", Replicated(!every)));
    if (!tied) {
      RESHARD_RETURN_NOT_OK(w_.Vocab("lm_head.weight", "lm_head.weight",
                                     Split(0, !every), row0, vocab_chunk_));
    }
  }
  return Status::OK();
}

Result<EngineLayout> Vllm::Run() {
  RESHARD_RETURN_NOT_OK(Check());
  return BuildRanks(
      ranks_, &b_, &w_, [this](const GridRank& r) { return Rank(r); }, c_, o_);
}

}  // namespace

Result<EngineLayout> VllmLayout(const HfConfig& config,
                                const CanonTensors& canon,
                                const EngineLayoutOptions& options,
                                const EngineRelease& release) {
  if (IsHybrid(config.arch)) {
    return VllmHybridLayout(config, canon, options, release);
  }
  RESHARD_RETURN_NOT_OK(CheckArchitecture(
      config, options,
      {HfArch::kLlama, HfArch::kQwen2, HfArch::kQwen3, HfArch::kQwen3Moe,
       HfArch::kMixtral, HfArch::kDeepseekV2, HfArch::kDeepseekV3,
       HfArch::kGlm4Moe}));
  return Vllm(config, canon, options, release).Run();
}

}  // namespace reshard::internal
