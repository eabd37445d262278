// HfLayout: a checkpoint's own tensor names on a TP/PP/EP/DP grid with the
// sharding inference engines use (docs/hf-checkpoints.md, "Layouts").

#include <algorithm>
#include <initializer_list>
#include <unordered_map>
#include <unordered_set>

#include "gen/tensor_layout.h"
#include "hf/hf_config.h"
#include "hf/hf_hybrid.h"
#include "reshard/hf.h"
#include "util/dims_text.h"
#include "util/float_convert.h"
#include "util/int_math.h"
#include "util/printable.h"

namespace reshard {
namespace {

using internal::CeilDiv;
using internal::DimsText;

using internal::HfConfig;
using internal::HfShard;
using internal::HfTensor;
using internal::Printable;

constexpr std::string_view kScaleSuffix = "weight_scale_inv";
// compressed-tensors' per-channel scale of an FP8 weight: [out, 1].
constexpr std::string_view kChannelScaleSuffix = "weight_scale";

using Planned = internal::HfLaidTensor;

std::string ScaleName(const std::string& weight) {
  return weight.substr(0, weight.size() - std::string_view("weight").size()) +
         std::string(kScaleSuffix);
}

Dims ScaleShape(const HfConfig& c, const Dims& w) {
  return {CeilDiv(w[0], c.block_rows), CeilDiv(w[1], c.block_cols)};
}

Planned Scale(const HfConfig& c, const HfTensor& w, const HfTensor* wp) {
  Planned s{w, wp};
  s.t.name = ScaleName(w.name);
  s.t.shape = ScaleShape(c, w.shape);
  s.t.dtype = c.scale_dtype;
  s.t.itemsize = FindSafetensorsDtypeByPlacement(c.scale_dtype)->itemsize;
  return s;
}

// The per-channel scale of weight `w`: one value per output row, split
// with the rows of a column-parallel weight, whole beside a row-parallel
// one (HfLayout's Add).
Planned ChannelScale(const HfConfig& c, const HfTensor& w, const HfTensor* wp) {
  Planned s{w, wp};
  s.t.name =
      w.name.substr(0, w.name.size() - std::string_view("weight").size()) +
      std::string(kChannelScaleSuffix);
  s.t.shape = {w.shape[0], 1};
  s.t.dtype = c.channel_scale_dtype;
  s.t.itemsize =
      FindSafetensorsDtypeByPlacement(c.channel_scale_dtype)->itemsize;
  return s;
}

bool IsChannelScale(const Planned& p) {
  return p.weight != nullptr && p.t.name.ends_with(kChannelScaleSuffix);
}

// Config-only: quantized weights become F8_E4M3, each followed by its
// scale.
std::vector<Planned> FromConfig(const HfConfig& c,
                                const std::vector<HfTensor>& model) {
  std::vector<Planned> out;
  for (const HfTensor& t : model) {
    out.push_back({t, nullptr});
    if (!t.quantized) continue;
    out.back().t.dtype = "float8_e4m3fn";
    out.back().t.itemsize = 1;
    out.push_back(c.fp8_channel ? ChannelScale(c, t, &t) : Scale(c, t, &t));
  }
  return out;
}

// A checkpoint tensor `name` ending in ".weight_scale": the per-channel
// scale of a 2-D weight of the architecture, under compressed-tensors.
Result<Planned> CheckpointChannelScale(
    const HfConfig& c,
    const std::unordered_map<std::string_view, const HfTensor*>& named,
    const CheckpointTensor& ct) {
  const std::string weight =
      ct.name.substr(0, ct.name.size() - kChannelScaleSuffix.size()) + "weight";
  auto w = named.find(weight);
  if (w == named.end() || w->second->shape.size() != 2) {
    return Status::InvalidArgument("checkpoint tensor " + Printable(ct.name) +
                                   " (in " + Printable(ct.file) +
                                   ") scales no weight of " + c.architecture);
  }
  if (!c.fp8_channel) {
    return Status::InvalidArgument(
        "checkpoint tensor " + Printable(ct.name) +
        " is a per-channel FP8 scale but config.json has no "
        "compressed-tensors quantization_config");
  }
  Planned p = ChannelScale(c, *w->second, w->second);
  if (ct.shape != p.t.shape) {
    return Status::InvalidArgument(
        ct.name + " is " + DimsText(ct.shape) + " in " + Printable(ct.file) +
        " but its weight implies " + DimsText(p.t.shape));
  }
  return p;
}

// A non-persistent buffer some exports carry (Kimi-K2's
// rotary_emb.inv_freq in every layer): recomputed by every model at load,
// so left out of the layout, never loaded and never written back.
bool IsBuffer(std::string_view name) {
  return name == "rotary_emb.inv_freq" ||
         name.ends_with(".rotary_emb.inv_freq");
}

// The dtypes the quantization schemes store (docs/hf-checkpoints.md):
// an FP8 block scale (weight_scale_inv) or per-channel scale
// (weight_scale) is float32, bfloat16 or float16 (widened exactly when
// dequantized) and the weight it scales float8_e4m3fn; MXFP4 blocks and
// scales are uint8. `what` names the role; InvalidArgument names the
// tensor, its file, its dtype and the dtypes the role allows.
Status CheckQuantizedDtype(const CheckpointTensor& ct, std::string_view what,
                           std::initializer_list<std::string_view> allowed) {
  std::string expected;
  size_t i = 0;
  for (std::string_view d : allowed) {
    if (d == ct.dtype) return Status::OK();
    expected += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ");
    expected += d;
    ++i;
  }
  return Status::InvalidArgument("checkpoint tensor " + Printable(ct.name) +
                                 " (in " + Printable(ct.file) + ") is " +
                                 ct.dtype + ", but " + std::string(what) +
                                 " must be " + expected);
}

// A checkpoint scale `ct` (`scale`: its role, "an FP8 block scale" or "a
// per-channel FP8 scale") and the checkpoint's weight it scales, both in
// their scheme's dtypes.
Status CheckScaleDtypes(const HfCheckpoint& ckpt, const CheckpointTensor& ct,
                        const std::string& weight, std::string_view scale) {
  RESHARD_RETURN_NOT_OK(
      CheckQuantizedDtype(ct, scale, {"float32", "bfloat16", "float16"}));
  const CheckpointTensor* w = ckpt.FindTensor(weight);
  if (w == nullptr) return Status::OK();  // FromCheckpoint names it
  return CheckQuantizedDtype(*w, "a weight with " + std::string(scale),
                             {"float8_e4m3fn"});
}

// With a checkpoint: exactly its tensors (less buffers), each one the
// architecture names (or the FP8 scale of one), with the checkpoint's dtype and
// the shape both agree on.
Result<std::vector<Planned>> FromCheckpoint(const HfConfig& c,
                                            const std::vector<HfTensor>& model,
                                            const HfCheckpoint& ckpt) {
  std::unordered_map<std::string_view, const HfTensor*> named;
  for (const HfTensor& t : model) named[t.name] = &t;
  std::vector<Planned> out;
  for (const HfTensor& t : model) {
    const CheckpointTensor* ct = ckpt.FindTensor(t.name);
    if (ct == nullptr) {
      return Status::NotFound("checkpoint lacks " + t.name + ", which " +
                              c.architecture + " config.json implies");
    }
    if (ct->shape != t.shape) {
      return Status::InvalidArgument(
          t.name + " is " + DimsText(ct->shape) + " in " + Printable(ct->file) +
          " but config.json implies " + DimsText(t.shape));
    }
  }
  for (const CheckpointTensor& ct : ckpt.tensors()) {
    if (IsBuffer(ct.name)) continue;
    Planned p;
    auto it = named.find(ct.name);
    if (it != named.end()) {
      p.t = *it->second;
      // gpt-oss's packed experts (the only uint8 tensors a config names).
      if (c.mxfp4 && p.t.dtype == "uint8") {
        RESHARD_RETURN_NOT_OK(
            CheckQuantizedDtype(ct, "an MXFP4 block or scale", {"uint8"}));
      }
    } else if (ct.name.ends_with("." + std::string(kChannelScaleSuffix))) {
      RESHARD_ASSIGN_OR_RETURN(p, CheckpointChannelScale(c, named, ct));
      RESHARD_RETURN_NOT_OK(CheckScaleDtypes(ckpt, ct, p.weight->name,
                                             "a per-channel FP8 scale"));
    } else if (ct.name.ends_with(kScaleSuffix)) {
      const std::string weight =
          ct.name.substr(0, ct.name.size() - kScaleSuffix.size()) + "weight";
      auto w = named.find(weight);
      if (w == named.end() || w->second->shape.size() != 2) {
        return Status::InvalidArgument(
            "checkpoint tensor " + Printable(ct.name) + " (in " +
            Printable(ct.file) + ") scales no weight of " + c.architecture);
      }
      if (!c.fp8) {
        return Status::InvalidArgument(
            "checkpoint tensor " + Printable(ct.name) +
            " is an FP8 block scale but config.json has no fp8 "
            "quantization_config.weight_block_size");
      }
      p = Scale(c, *w->second, w->second);
      if (ct.shape != p.t.shape) {
        return Status::InvalidArgument(
            ct.name + " is " + DimsText(ct.shape) + " in " +
            Printable(ct.file) + " but its weight and weight_block_size " +
            "imply " + DimsText(p.t.shape));
      }
      RESHARD_RETURN_NOT_OK(
          CheckScaleDtypes(ckpt, ct, weight, "an FP8 block scale"));
    } else {
      return Status::InvalidArgument("checkpoint tensor " + Printable(ct.name) +
                                     " (in " + Printable(ct.file) +
                                     ") is not a tensor of " + c.architecture +
                                     ": refusing to guess its layout");
    }
    p.t.dtype = ct.dtype;
    p.t.itemsize = ct.itemsize;
    out.push_back(std::move(p));
  }
  return out;
}

Status CheckGrid(const HfConfig& c, const ParallelSizes& n) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"tp", n.tp}, {"pp", n.pp}, {"ep", n.ep}, {"dp", n.dp}};
  for (const auto& [name, v] : sizes) {
    if (v < 1) {
      return Status::InvalidArgument(std::string("--") + name +
                                     " must be >= 1");
    }
  }
  // The grid is materialised participant by participant.
  constexpr int64_t kMaxParticipants = int64_t{1} << 20;
  if (n.tp > kMaxParticipants || n.pp > kMaxParticipants ||
      n.ep > kMaxParticipants || n.dp > kMaxParticipants ||
      n.tp * n.pp >
          kMaxParticipants / std::min(n.ep * n.dp, kMaxParticipants) ||
      n.ep * n.dp > kMaxParticipants) {
    return Status::InvalidArgument(
        "a grid of tp " + std::to_string(n.tp) + " x pp " +
        std::to_string(n.pp) + " x ep " + std::to_string(n.ep) + " x dp " +
        std::to_string(n.dp) + " exceeds " + std::to_string(kMaxParticipants) +
        " participants");
  }
  if (n.pp > c.layers) {
    return Status::InvalidArgument("PP " + std::to_string(n.pp) +
                                   " exceeds the " + std::to_string(c.layers) +
                                   " layers of " + c.architecture);
  }
  if (n.ep > 1 && c.experts == 0) {
    return Status::InvalidArgument("EP " + std::to_string(n.ep) +
                                   " needs routed experts; " + c.architecture +
                                   " has none");
  }
  if (c.experts > 0 && c.experts % n.ep != 0) {
    return Status::InvalidArgument(
        "EP " + std::to_string(n.ep) + " does not divide the " +
        std::to_string(c.experts) + " routed experts of " + c.architecture);
  }
  if (c.heads % n.tp != 0) {
    return Status::InvalidArgument(
        "TP " + std::to_string(n.tp) + " does not divide the " +
        std::to_string(c.heads) + " attention heads of " + c.architecture);
  }
  const bool gqa = !internal::UsesMla(c.arch);
  if (gqa && n.tp <= c.kv_heads && c.kv_heads % n.tp != 0) {
    return Status::InvalidArgument(
        "TP " + std::to_string(n.tp) + " does not divide the " +
        std::to_string(c.kv_heads) + " KV heads of " + c.architecture);
  }
  return internal::CheckHybridTp(c, n.tp);
}

class Layout {
 public:
  Layout(const HfConfig& c, const HfLayoutOptions& o) : c_(c), n_(o.sizes) {
    topo_.sizes = n_;
    for (int64_t dp = 0; dp < n_.dp; ++dp) {
      for (int64_t pp = 0; pp < n_.pp; ++pp) {
        for (int64_t ep = 0; ep < n_.ep; ++ep) {
          for (int64_t tp = 0; tp < n_.tp; ++tp) {
            topo_.participants.push_back(
                {"p-d" + std::to_string(dp) + "-p" + std::to_string(pp) + "-e" +
                     std::to_string(ep) + "-t" + std::to_string(tp),
                 ParallelRank{dp, tp, pp, ep}});
          }
        }
      }
    }
  }

  // The TP split dimension of a tensor (or of the weight a scale
  // follows); -1 replicated.
  int64_t TpDim(const HfTensor& t) const {
    const bool expert = t.expert || t.grouped_experts;
    if (n_.tp == 1 || (expert && n_.ep > 1)) return -1;
    // Grouped experts' rows and columns follow their expert dimension.
    const int64_t base = t.grouped_experts ? 1 : 0;
    switch (t.shard) {
      case HfShard::kColumn:
      case HfShard::kVocab:
        return base;
      case HfShard::kRow:
        return base + 1;
      case HfShard::kKvColumn:
        return n_.tp > c_.kv_heads ? -1 : 0;
      case HfShard::kReplicated:
        return -1;
    }
    return -1;
  }

  int64_t Stage(const HfTensor& t) const {
    if (t.last_stage) return n_.pp - 1;
    if (!t.layer) return 0;
    return *t.layer * n_.pp / c_.layers;
  }

  Status Add(const Planned& p) {
    const HfTensor& role = p.weight != nullptr ? *p.weight : p.t;
    internal::TensorLayout l;
    l.tensor_id = p.t.name;
    l.shape = p.t.shape;
    l.dtype = p.t.dtype;
    l.itemsize = p.t.itemsize;
    l.tp_dim = TpDim(role);
    // A per-channel scale beside a row-parallel weight is whole: its rows
    // are the weight's outputs, which the split does not divide.
    if (IsChannelScale(p) && l.tp_dim != 0) l.tp_dim = -1;
    if (l.tp_dim >= 0 && !role.tp_sections.empty()) {
      RESHARD_ASSIGN_OR_RETURN(l.tp_sections, SectionsOf(p, role));
    }
    l.pp_owner = n_.pp > 1 ? Stage(role) : -1;
    l.layer_id = role.layer;
    l.expert_id = role.expert;
    if (role.expert && n_.ep > 1) {
      l.ep_owner = *role.expert / (c_.experts / n_.ep);
    }
    l.ep_split = role.grouped_experts && n_.ep > 1;
    if (role.shard == HfShard::kVocab && l.tp_dim == 0) {
      RESHARD_ASSIGN_OR_RETURN(l.tp_chunk, VocabChunk(p.t));
    }
    if (p.weight != nullptr && l.tp_dim >= 0 && !IsChannelScale(p) &&
        role.tp_sections.empty()) {
      RESHARD_RETURN_NOT_OK(CheckBlocks(*p.weight, l.tp_dim, p.t.name));
    }
    return internal::AppendTensorLayout(topo_, l, &tensors_, &fragments_);
  }

  // The sections of a sectioned split: the weight's, or for an FP8 block
  // scale the weight's in blocks (each rank's share of every section must
  // be whole blocks).
  Result<std::vector<int64_t>> SectionsOf(const Planned& p,
                                          const HfTensor& role) const {
    if (p.weight == nullptr || IsChannelScale(p)) return role.tp_sections;
    std::vector<int64_t> blocks;
    for (int64_t s : role.tp_sections) {
      if (s % n_.tp != 0 || (s / n_.tp) % c_.block_rows != 0) {
        return Status::InvalidArgument(
            "TP " + std::to_string(n_.tp) + " splits a section of " +
            std::to_string(s) + " rows of " + role.name +
            " into shares that are not whole FP8 blocks of " +
            std::to_string(c_.block_rows) + " (its scale " + p.t.name + ")");
      }
      blocks.push_back(s / c_.block_rows);
    }
    return blocks;
  }

  // Rows per TP rank of a vocabulary-parallel tensor, as vLLM pads it:
  // the vocabulary rounded up to a multiple of 64, divided by TP; rank r
  // holds token ids [r * chunk, (r + 1) * chunk) that exist, the rest of
  // its engine buffer is padding that no checkpoint holds. A vocabulary
  // that is a multiple of 64 * TP splits evenly.
  Result<int64_t> VocabChunk(const HfTensor& t) const {
    constexpr int64_t kPad = 64;
    const int64_t v = t.shape[0];
    const int64_t padded = (v + kPad - 1) / kPad * kPad;
    if (padded % n_.tp != 0 || (n_.tp - 1) * (padded / n_.tp) >= v) {
      return Status::InvalidArgument(
          "TP " + std::to_string(n_.tp) + " cannot split the vocabulary of " +
          t.name + " (" + std::to_string(v) + " rows, " +
          std::to_string(padded) +
          " padded to a multiple of 64): every rank needs an equal share of "
          "the padded rows and at least one real row");
    }
    return padded / n_.tp;
  }

  // A TP shard of an FP8 weight must hold whole blocks of its scale.
  Status CheckBlocks(const HfTensor& w, int64_t dim, const std::string& scale) {
    const int64_t block = dim == 0 ? c_.block_rows : c_.block_cols;
    const int64_t extent = w.shape[static_cast<size_t>(dim)];
    if (extent % n_.tp != 0 || (extent / n_.tp) % block != 0) {
      return Status::InvalidArgument(
          "TP " + std::to_string(n_.tp) + " splits dimension " +
          std::to_string(dim) + " (" + std::to_string(extent) + ") of " +
          w.name + " into shards that are not whole FP8 blocks of " +
          std::to_string(block) + " (its scale " + scale + ")");
    }
    return Status::OK();
  }

  Result<WeightPlacementManifest> Build(const HfLayoutOptions& o) {
    const std::string model =
        c_.model_type.empty() ? c_.architecture : c_.model_type;
    PlacementHeader header{o.resource_id.empty() ? model : o.resource_id,
                           o.revision, o.weight_generation,
                           internal::GridPlacementSetId(model, n_)};
    return internal::ManifestFromSpecs(
        std::move(header), topo_, std::move(tensors_), std::move(fragments_));
  }

 private:
  const HfConfig& c_;
  const ParallelSizes& n_;
  ParallelTopologySpec topo_;
  std::vector<TensorDescriptorSpec> tensors_;
  std::vector<PlacementFragmentSpec> fragments_;
};

// The float dtypes conversions know (float32, bfloat16, float16,
// float8_e4m3fn).
bool IsFloat(std::string_view dtype) {
  return internal::FloatTypeOf(dtype).has_value();
}

Status ToDtype(std::string_view dtype, HfConfig* c,
               std::vector<Planned>* planned) {
  const SafetensorsDtype* dt = FindSafetensorsDtypeByPlacement(dtype);
  if (dt == nullptr ||
      (dtype != "float32" && dtype != "bfloat16" && dtype != "float16")) {
    return Status::InvalidArgument(
        "--dtype must be float32, bfloat16 or float16, not " +
        Printable(dtype));
  }
  // What the checkpoint stores wider than torch_dtype (DeepSeek's F32
  // e_score_correction_bias, Qwen3-Next's F32 A_log) is kept as it is, as
  // DeepSeek's FP8-to-BF16 script and the engines keep it: only tensors in
  // the model dtype or narrower (FP8 weights) are converted.
  const int64_t model_itemsize =
      FindSafetensorsDtypeByPlacement(c->dtype)->itemsize;
  std::vector<Planned> out;
  for (Planned& p : *planned) {
    if (p.weight != nullptr) continue;  // a scale: the float form has none
    if (IsFloat(p.t.dtype) && p.t.itemsize <= model_itemsize) {
      p.t.dtype = std::string(dtype);
      p.t.itemsize = dt->itemsize;
    }
    out.push_back(std::move(p));
  }
  *planned = std::move(out);
  c->fp8 = false;
  return Status::OK();
}

Status ToFp8(const Fp8Block& block, const std::vector<HfTensor>& model,
             HfConfig* c, std::vector<Planned>* planned) {
  if (block.rows < 1 || block.cols < 1) {
    return Status::InvalidArgument("--block must be positive, not " +
                                   std::to_string(block.rows) + "x" +
                                   std::to_string(block.cols));
  }
  if (c->fp8 && (c->block_rows != block.rows || c->block_cols != block.cols)) {
    return Status::InvalidArgument(
        "the checkpoint is block-FP8 with " + std::to_string(c->block_rows) +
        "x" + std::to_string(c->block_cols) + " blocks, not --block " +
        std::to_string(block.rows) + "x" + std::to_string(block.cols));
  }
  if (!c->fp8) c->scale_dtype = "float32";  // what quantization produces
  c->fp8 = true;
  c->block_rows = block.rows;
  c->block_cols = block.cols;
  std::unordered_map<std::string_view, const HfTensor*> named;
  for (const HfTensor& t : model) named[t.name] = &t;
  std::vector<Planned> out;
  for (Planned& p : *planned) {
    const bool quantize = p.weight == nullptr && p.t.linear &&
                          p.t.shape.size() == 2 && IsFloat(p.t.dtype) &&
                          p.t.dtype != "float8_e4m3fn";
    out.push_back(std::move(p));
    if (!quantize) continue;
    Planned& w = out.back();
    w.t.dtype = "float8_e4m3fn";
    w.t.itemsize = 1;
    out.push_back(Scale(*c, w.t, named.at(w.t.name)));
  }
  *planned = std::move(out);
  return Status::OK();
}

}  // namespace

namespace internal {

Status ApplyLayoutForm(std::string_view quantize, const Fp8Block& block,
                       std::string_view dtype,
                       const std::vector<HfTensor>& model, HfConfig* config,
                       std::vector<HfLaidTensor>* laid) {
  if (!quantize.empty() && !dtype.empty()) {
    return Status::InvalidArgument("--quantize and --dtype exclude each other");
  }
  if (config->fp8_channel && (!quantize.empty() || !dtype.empty())) {
    return Status::Unimplemented(
        "--quantize and --dtype do not convert compressed-tensors FP8 "
        "checkpoints (per-channel scales); lay them out as they are");
  }
  if (!dtype.empty()) return ToDtype(dtype, config, laid);
  if (quantize.empty()) return Status::OK();
  if (quantize != "fp8") {
    return Status::InvalidArgument("--quantize must be fp8, not " +
                                   Printable(quantize));
  }
  return ToFp8(block, model, config, laid);
}

Result<std::vector<HfLaidTensor>> HfLayoutTensors(
    const HfConfig& c, const std::vector<HfTensor>& model,
    const HfCheckpoint* checkpoint) {
  if (checkpoint != nullptr) return FromCheckpoint(c, model, *checkpoint);
  return FromConfig(c, model);
}

}  // namespace internal

Result<WeightPlacementManifest> HfLayout(std::string_view config_json,
                                         const HfLayoutOptions& options,
                                         const HfCheckpoint* checkpoint) {
  RESHARD_ASSIGN_OR_RETURN(HfConfig c, internal::ParseHfConfig(config_json));
  if (checkpoint != nullptr) {
    RESHARD_RETURN_NOT_OK(internal::AdaptToCheckpoint(*checkpoint, &c));
  }
  RESHARD_RETURN_NOT_OK(CheckGrid(c, options.sizes));
  RESHARD_ASSIGN_OR_RETURN(auto model, internal::HfModelTensors(c));
  RESHARD_ASSIGN_OR_RETURN(std::vector<Planned> planned,
                           internal::HfLayoutTensors(c, model, checkpoint));
  RESHARD_RETURN_NOT_OK(internal::ApplyLayoutForm(
      options.quantize, options.block, options.dtype, model, &c, &planned));
  Layout layout(c, options);
  for (const Planned& p : planned) RESHARD_RETURN_NOT_OK(layout.Add(p));
  return layout.Build(options);
}

}  // namespace reshard
