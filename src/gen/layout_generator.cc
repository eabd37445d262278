// GenerateLayout: every weight tensor of a model on a dp x pp x ep x tp
// grid, with the usual sharding (docs/model-spec.md):
// column-parallel projections split dim 0 over TP, row-parallel ones dim 1,
// norms and routers replicated; experts split over EP (grouped) or owned by
// one EP rank (separate) with TP inside each expert; contiguous blocks of
// layers per PP stage, embeddings on the first stage and the final norm and
// lm_head on the last; DP replicas complete.

#include <string>
#include <vector>

#include "gen/tensor_layout.h"
#include "reshard/gen.h"

namespace reshard {
namespace {

using internal::TensorLayout;

class Builder {
 public:
  Builder(const ModelSpec& m, const LayoutOptions& o)
      : m_(m), o_(o), n_(o.sizes) {
    topo_.sizes = o.sizes;
    for (int64_t dp = 0; dp < o.sizes.dp; ++dp) {
      for (int64_t pp = 0; pp < o.sizes.pp; ++pp) {
        for (int64_t ep = 0; ep < o.sizes.ep; ++ep) {
          for (int64_t tp = 0; tp < o.sizes.tp; ++tp) {
            ParallelRank r{dp, tp, pp, ep};
            topo_.participants.push_back(
                {"p-d" + std::to_string(dp) + "-p" + std::to_string(pp) + "-e" +
                     std::to_string(ep) + "-t" + std::to_string(tp),
                 r});
          }
        }
      }
    }
  }

  // tp_dim: -1 replicated over TP.
  Status Add(std::string id, Dims shape, int64_t tp_dim, int64_t stage,
             std::optional<int64_t> layer) {
    TensorLayout l;
    l.tensor_id = std::move(id);
    l.shape = std::move(shape);
    l.dtype = m_.dtype;
    l.itemsize = m_.itemsize;
    l.tp_dim = n_.tp > 1 ? tp_dim : -1;
    l.pp_owner = n_.pp > 1 ? stage : -1;
    l.layer_id = layer;
    return Append(l);
  }

  Status Append(TensorLayout& l) {
    if (n_.tp == 1) l.tp_dim = -1;
    return internal::AppendTensorLayout(topo_, l, &tensors_, &fragments_);
  }

  int64_t StageOf(int64_t layer) const { return layer * n_.pp / m_.layers; }

  // One decoder layer: norms, attention, then the dense or MoE MLP.
  Status AddLayer(int64_t l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int64_t s = StageOf(l);
    const int64_t h = m_.hidden;
    RESHARD_RETURN_NOT_OK(Add(p + "input_layernorm.weight", {h}, -1, s, l));
    RESHARD_RETURN_NOT_OK(
        Add(p + "post_attention_layernorm.weight", {h}, -1, s, l));
    const std::string a = p + "self_attn.";
    RESHARD_RETURN_NOT_OK(m_.attention == "gqa" ? AddGqaAttention(a, s, l)
                                                : AddMlaAttention(a, s, l));
    const std::string mlp = p + "mlp.";
    if (m_.experts == 0 || l < m_.dense_layers) return AddDenseMlp(mlp, s, l);
    RESHARD_RETURN_NOT_OK(AddRouterAndSharedExperts(mlp, s, l));
    return o_.experts == ExpertTensors::kGrouped
               ? AddGroupedExperts(mlp, s, l)
               : AddSeparateExperts(mlp, s, l);
  }

  // Grouped-query attention: q/k/v column-parallel, o row-parallel.
  Status AddGqaAttention(const std::string& a, int64_t s, int64_t l) {
    const int64_t h = m_.hidden;
    const int64_t hd = m_.head_dim;
    RESHARD_RETURN_NOT_OK(
        Add(a + "q_proj.weight", {m_.heads * hd, h}, 0, s, l));
    RESHARD_RETURN_NOT_OK(
        Add(a + "k_proj.weight", {m_.kv_heads * hd, h}, 0, s, l));
    RESHARD_RETURN_NOT_OK(
        Add(a + "v_proj.weight", {m_.kv_heads * hd, h}, 0, s, l));
    RESHARD_RETURN_NOT_OK(
        Add(a + "o_proj.weight", {h, m_.heads * hd}, 1, s, l));
    if (m_.qk_norm) {
      RESHARD_RETURN_NOT_OK(Add(a + "q_norm.weight", {hd}, -1, s, l));
      RESHARD_RETURN_NOT_OK(Add(a + "k_norm.weight", {hd}, -1, s, l));
    }
    return Status::OK();
  }

  // Multi-head latent attention: the low-rank down projections and their
  // norms replicated, the up projections column-parallel, o row-parallel.
  Status AddMlaAttention(const std::string& a, int64_t s, int64_t l) {
    const int64_t h = m_.hidden;
    const int64_t qk = m_.qk_nope_head_dim + m_.qk_rope_head_dim;
    RESHARD_RETURN_NOT_OK(
        Add(a + "q_a_proj.weight", {m_.q_lora_rank, h}, -1, s, l));
    RESHARD_RETURN_NOT_OK(
        Add(a + "q_a_layernorm.weight", {m_.q_lora_rank}, -1, s, l));
    RESHARD_RETURN_NOT_OK(
        Add(a + "q_b_proj.weight", {m_.heads * qk, m_.q_lora_rank}, 0, s, l));
    RESHARD_RETURN_NOT_OK(Add(a + "kv_a_proj_with_mqa.weight",
                              {m_.kv_lora_rank + m_.qk_rope_head_dim, h}, -1, s,
                              l));
    RESHARD_RETURN_NOT_OK(
        Add(a + "kv_a_layernorm.weight", {m_.kv_lora_rank}, -1, s, l));
    RESHARD_RETURN_NOT_OK(
        Add(a + "kv_b_proj.weight",
            {m_.heads * (m_.qk_nope_head_dim + m_.v_head_dim), m_.kv_lora_rank},
            0, s, l));
    return Add(a + "o_proj.weight", {h, m_.heads * m_.v_head_dim}, 1, s, l);
  }

  Status AddDenseMlp(const std::string& mlp, int64_t s, int64_t l) {
    const int64_t h = m_.hidden;
    const int64_t i = m_.intermediate;
    RESHARD_RETURN_NOT_OK(Add(mlp + "gate_proj.weight", {i, h}, 0, s, l));
    RESHARD_RETURN_NOT_OK(Add(mlp + "up_proj.weight", {i, h}, 0, s, l));
    return Add(mlp + "down_proj.weight", {h, i}, 1, s, l);
  }

  // The replicated router (and its bias), then the shared experts as one
  // dense MLP.
  Status AddRouterAndSharedExperts(const std::string& mlp, int64_t s,
                                   int64_t l) {
    const int64_t h = m_.hidden;
    const int64_t e = m_.experts;
    RESHARD_RETURN_NOT_OK(Add(mlp + "gate.weight", {e, h}, -1, s, l));
    if (m_.router_bias) {
      RESHARD_RETURN_NOT_OK(
          Add(mlp + "gate.e_score_correction_bias", {e}, -1, s, l));
    }
    if (m_.shared_experts > 0) {
      const int64_t si = m_.shared_experts * m_.moe_intermediate;
      const std::string se = mlp + "shared_experts.";
      RESHARD_RETURN_NOT_OK(Add(se + "gate_proj.weight", {si, h}, 0, s, l));
      RESHARD_RETURN_NOT_OK(Add(se + "up_proj.weight", {si, h}, 0, s, l));
      RESHARD_RETURN_NOT_OK(Add(se + "down_proj.weight", {h, si}, 1, s, l));
    }
    return Status::OK();
  }

  // ExpertTensors::kGrouped: one [experts, ...] tensor per projection, EP
  // splitting dim 0 and TP inside each expert.
  Status AddGroupedExperts(const std::string& mlp, int64_t s, int64_t l) {
    const int64_t h = m_.hidden;
    const int64_t e = m_.experts;
    const int64_t mi = m_.moe_intermediate;
    for (const char* name : {"gate_proj", "up_proj", "down_proj"}) {
      const bool down = std::string(name) == "down_proj";
      TensorLayout t;
      t.tensor_id = mlp + "experts." + name;
      t.shape = down ? Dims{e, h, mi} : Dims{e, mi, h};
      t.dtype = m_.dtype;
      t.itemsize = m_.itemsize;
      t.tp_dim = down ? 2 : 1;  // TP inside each expert: moe_intermediate
      t.ep_split = n_.ep > 1;
      t.pp_owner = n_.pp > 1 ? s : -1;
      t.layer_id = l;
      RESHARD_RETURN_NOT_OK(Append(t));
    }
    return Status::OK();
  }

  // ExpertTensors::kSeparate: one tensor per expert and projection, owned by
  // one EP rank (contiguous blocks of experts per rank).
  Status AddSeparateExperts(const std::string& mlp, int64_t s, int64_t l) {
    const int64_t h = m_.hidden;
    const int64_t e = m_.experts;
    const int64_t mi = m_.moe_intermediate;
    const int64_t per_rank = e / n_.ep;
    for (int64_t x = 0; x < e; ++x) {
      for (const char* name : {"gate_proj", "up_proj", "down_proj"}) {
        const bool down = std::string(name) == "down_proj";
        TensorLayout t;
        t.tensor_id =
            mlp + "experts." + std::to_string(x) + "." + name + ".weight";
        t.shape = down ? Dims{h, mi} : Dims{mi, h};
        t.dtype = m_.dtype;
        t.itemsize = m_.itemsize;
        t.tp_dim = down ? 1 : 0;
        t.pp_owner = n_.pp > 1 ? s : -1;
        t.layer_id = l;
        t.expert_id = x;
        if (n_.ep > 1) t.ep_owner = x / per_rank;
        RESHARD_RETURN_NOT_OK(Append(t));
      }
    }
    return Status::OK();
  }

  Result<WeightPlacementManifest> Build() {
    const int64_t last = n_.pp - 1;
    RESHARD_RETURN_NOT_OK(
        Add("model.embed_tokens.weight", {m_.vocab, m_.hidden}, 0, 0, {}));
    for (int64_t l = 0; l < m_.layers; ++l) RESHARD_RETURN_NOT_OK(AddLayer(l));
    RESHARD_RETURN_NOT_OK(Add("model.norm.weight", {m_.hidden}, -1, last, {}));
    RESHARD_RETURN_NOT_OK(
        Add("lm_head.weight", {m_.vocab, m_.hidden}, 0, last, {}));
    PlacementHeader header{o_.resource_id.empty() ? m_.name : o_.resource_id,
                           o_.revision, o_.weight_generation,
                           internal::GridPlacementSetId(m_.name, n_)};
    return internal::ManifestFromSpecs(
        std::move(header), topo_, std::move(tensors_), std::move(fragments_));
  }

 private:
  const ModelSpec& m_;
  const LayoutOptions& o_;
  const ParallelSizes& n_;
  ParallelTopologySpec topo_;
  std::vector<TensorDescriptorSpec> tensors_;
  std::vector<PlacementFragmentSpec> fragments_;
};

}  // namespace

Result<WeightPlacementManifest> GenerateLayout(const ModelSpec& model,
                                               const LayoutOptions& o) {
  const std::pair<const char*, int64_t> sizes[] = {{"tp", o.sizes.tp},
                                                   {"pp", o.sizes.pp},
                                                   {"ep", o.sizes.ep},
                                                   {"dp", o.sizes.dp}};
  for (const auto& [name, v] : sizes) {
    if (v < 1) {
      return Status::InvalidArgument(std::string("--") + name +
                                     " must be >= 1");
    }
  }
  if (o.sizes.pp > model.layers) {
    return Status::InvalidArgument(
        "PP " + std::to_string(o.sizes.pp) + " exceeds the layer count " +
        std::to_string(model.layers) + " of " + model.name);
  }
  if (o.sizes.ep > 1 && model.experts == 0) {
    return Status::InvalidArgument("EP " + std::to_string(o.sizes.ep) +
                                   " needs an MoE model; " + model.name +
                                   " has no experts");
  }
  if (model.experts > 0 && model.experts % o.sizes.ep != 0) {
    return Status::InvalidArgument("EP " + std::to_string(o.sizes.ep) +
                                   " does not divide the expert count " +
                                   std::to_string(model.experts) + " of " +
                                   model.name);
  }
  Builder b(model, o);
  return b.Build();
}

}  // namespace reshard
