// config.json read into an HfConfig, and what a checkpoint tells the
// config (docs/hf-checkpoints.md). The tensors each architecture names
// for a config are in tensor_catalogue.cc.

#include "hf/hf_config.h"

#include <algorithm>
#include <array>
#include <utility>

#include "hf/config_reader.h"
#include "hf/hf_hybrid.h"
#include "reshard/hf.h"
#include "util/json_reader.h"
#include "util/printable.h"

namespace reshard::internal {
namespace {

constexpr std::pair<std::string_view, HfArch> kArchitectures[] = {
    {"LlamaForCausalLM", HfArch::kLlama},
    {"Qwen2ForCausalLM", HfArch::kQwen2},
    {"Qwen3ForCausalLM", HfArch::kQwen3},
    {"Qwen3MoeForCausalLM", HfArch::kQwen3Moe},
    {"MistralForCausalLM", HfArch::kLlama},
    {"MixtralForCausalLM", HfArch::kMixtral},
    {"DeepseekV2ForCausalLM", HfArch::kDeepseekV2},
    {"DeepseekV3ForCausalLM", HfArch::kDeepseekV3},
    {"Glm4MoeForCausalLM", HfArch::kGlm4Moe},
    {"GptOssForCausalLM", HfArch::kGptOss},
    {"Qwen3NextForCausalLM", HfArch::kQwen3Next},
    {"Qwen3_5ForConditionalGeneration", HfArch::kQwen35},
    {"Qwen3_5MoeForConditionalGeneration", HfArch::kQwen35Moe},
    // The text-only classes: the language model under model.*, no vision
    // tower; config.json flat or with text_config.
    {"Qwen3_5ForCausalLM", HfArch::kQwen35},
    {"Qwen3_5MoeForCausalLM", HfArch::kQwen35Moe},
};

Status ReadArchitecture(const ConfigReader& r, HfConfig* c) {
  simdjson::dom::array archs;
  std::string_view name;
  if (r.object()["architectures"].get_array().get(archs) != simdjson::SUCCESS ||
      archs.size() != 1 || archs.at(0).get_string().get(name) != 0) {
    return Status::InvalidArgument(
        "config.json: architectures must be a list of one name");
  }
  c->architecture = std::string(name);
  for (const auto& [n, arch] : kArchitectures) {
    if (n == name) {
      c->arch = arch;
      c->text_only = (arch == HfArch::kQwen35 || arch == HfArch::kQwen35Moe) &&
                     name.ends_with("ForCausalLM");
      return Status::OK();
    }
  }
  std::string known;
  for (const auto& [n, arch] : kArchitectures) {
    known += (known.empty() ? "" : ", ") + std::string(n);
  }
  return Status::Unimplemented("unknown architecture " + Printable(name) +
                               " (supported: " + known + ")");
}

// compressed-tensors FP8 with per-channel weight scales (GLM-4.5-FP8):
// every config group quantizes weights to 8-bit floats by channel.
Status ReadCompressedTensors(const ConfigReader& q, HfConfig* c) {
  const char* kNeeds =
      "config.json: compressed-tensors quantization is supported as FP8 "
      "weights with per-channel scales (config_groups.*.weights: num_bits 8, "
      "type float, strategy channel)";
  simdjson::dom::object groups;
  if (q.object()["config_groups"].get_object().get(groups) != 0 ||
      groups.size() == 0) {
    return Status::Unimplemented(kNeeds);
  }
  for (auto [name, group] : groups) {
    simdjson::dom::object g, w;
    if (group.get_object().get(g) != 0 || g["weights"].get_object().get(w)) {
      return Status::Unimplemented(kNeeds);
    }
    ConfigReader wr(w);
    auto bits = wr.Int("num_bits", 0);
    auto type = wr.String("type", "");
    auto strategy = wr.String("strategy", "");
    if (!bits.ok() || *bits != 8 || !type.ok() || *type != "float" ||
        !strategy.ok() || *strategy != "channel") {
      return Status::Unimplemented(std::string(kNeeds) + "; group " +
                                   Printable(name) + " is not");
    }
  }
  std::vector<std::string> entries;
  if (q.Has("ignore")) {
    simdjson::dom::array ignore;
    if (q.object()["ignore"].get_array().get(ignore) != 0) {
      return Status::InvalidArgument(
          "config.json: quantization_config.ignore must be a list of names");
    }
    for (auto e : ignore) {
      std::string_view v;
      if (e.get_string().get(v) != 0) {
        return Status::InvalidArgument(
            "config.json: quantization_config.ignore must be a list of names");
      }
      entries.emplace_back(v);
    }
  }
  RESHARD_ASSIGN_OR_RETURN(ModuleIgnoreList list,
                           ModuleIgnoreList::Make(std::move(entries)));
  c->quant_ignore = std::make_shared<const ModuleIgnoreList>(std::move(list));
  c->fp8_channel = true;
  return Status::OK();
}

Status ReadQuantization(const ConfigReader& r, HfConfig* c) {
  if (!r.Has("quantization_config")) return Status::OK();
  simdjson::dom::object q;
  if (r.object()["quantization_config"].get_object().get(q) != 0) {
    return Status::InvalidArgument(
        "config.json: quantization_config must be an object");
  }
  ConfigReader qr(q);
  RESHARD_ASSIGN_OR_RETURN(auto method, qr.String("quant_method", ""));
  // gpt-oss's experts are MXFP4 blocks and scales of their own names
  // (AddGptOssExperts); every other tensor keeps torch_dtype.
  if (method == "mxfp4" && c->arch == HfArch::kGptOss) {
    c->mxfp4 = true;
    return Status::OK();
  }
  if (method == "compressed-tensors") return ReadCompressedTensors(qr, c);
  if (method != "fp8") {
    return Status::Unimplemented(
        "config.json: quantization_config.quant_method " + Printable(method) +
        " is not supported (fp8 with weight_block_size is, and "
        "compressed-tensors FP8 with per-channel scales)");
  }
  RESHARD_ASSIGN_OR_RETURN(auto block, qr.Ints("weight_block_size"));
  if (block.size() != 2 || block[0] < 1 || block[1] < 1) {
    return Status::Unimplemented(
        "config.json: fp8 quantization_config needs weight_block_size "
        "[rows, cols]");
  }
  c->fp8 = true;
  c->block_rows = block[0];
  c->block_cols = block[1];
  return Status::OK();
}

// torch_dtype, or transformers 5's dtype, or `fallback`.
Result<std::string> ReadDtype(const ConfigReader& r,
                              std::string_view fallback) {
  if (r.Has("torch_dtype")) return r.String("torch_dtype", fallback);
  return r.String("dtype", fallback);
}

Status ReadDims(const ConfigReader& r, HfConfig* c) {
  RESHARD_ASSIGN_OR_RETURN(c->hidden, r.Int("hidden_size"));
  RESHARD_ASSIGN_OR_RETURN(c->vocab, r.Int("vocab_size"));
  RESHARD_ASSIGN_OR_RETURN(c->layers, r.Int("num_hidden_layers"));
  RESHARD_ASSIGN_OR_RETURN(c->heads, r.Int("num_attention_heads"));
  RESHARD_ASSIGN_OR_RETURN(c->kv_heads, r.Int("num_key_value_heads", c->heads));
  const std::pair<const char*, int64_t> positive[] = {
      {"hidden_size", c->hidden},
      {"vocab_size", c->vocab},
      {"num_hidden_layers", c->layers},
      {"num_attention_heads", c->heads},
      {"num_key_value_heads", c->kv_heads}};
  for (const auto& [name, v] : positive) {
    if (v < 1) {
      return Status::InvalidArgument(std::string("config.json: ") + name +
                                     " must be at least 1");
    }
  }
  RESHARD_ASSIGN_OR_RETURN(c->head_dim,
                           r.Int("head_dim", c->hidden / c->heads));
  RESHARD_ASSIGN_OR_RETURN(c->intermediate, r.Int("intermediate_size", 0));
  RESHARD_ASSIGN_OR_RETURN(c->tie_word_embeddings,
                           r.Bool("tie_word_embeddings", false));
  RESHARD_ASSIGN_OR_RETURN(std::string dtype, ReadDtype(r, "float32"));
  if (FindSafetensorsDtypeByPlacement(dtype) == nullptr) {
    return Status::InvalidArgument("config.json: unknown torch_dtype " +
                                   Printable(dtype));
  }
  c->dtype = dtype;
  return Status::OK();
}

// The routed expert count: transformers 4.x configs of Qwen3-MoE say
// num_experts where Mixtral's (and configs re-saved by transformers 5)
// say num_local_experts; either is accepted, both must agree.
Result<int64_t> ExpertCount(const ConfigReader& r) {
  if (!r.Has("num_local_experts")) return r.Int("num_experts");
  RESHARD_ASSIGN_OR_RETURN(int64_t local, r.Int("num_local_experts"));
  if (r.Has("num_experts")) {
    RESHARD_ASSIGN_OR_RETURN(int64_t n, r.Int("num_experts"));
    if (n != local) {
      return Status::InvalidArgument(
          "config.json: num_experts " + std::to_string(n) +
          " disagrees with num_local_experts " + std::to_string(local));
    }
  }
  return local;
}

// DeepSeek-V2/V3 and GLM-4.5: dense first layers, then routed and shared
// experts; noaux_tc routing (and GLM-4.5) adds the correction bias.
Status ReadDeepseekMoe(const ConfigReader& r, HfConfig* c) {
  RESHARD_ASSIGN_OR_RETURN(c->experts, r.Int("n_routed_experts"));
  RESHARD_ASSIGN_OR_RETURN(c->moe_intermediate, r.Int("moe_intermediate_size"));
  RESHARD_ASSIGN_OR_RETURN(c->shared_experts, r.Int("n_shared_experts", 0));
  RESHARD_ASSIGN_OR_RETURN(c->first_k_dense, r.Int("first_k_dense_replace", 0));
  RESHARD_ASSIGN_OR_RETURN(c->moe_layer_freq, r.Int("moe_layer_freq", 1));
  // transformers' DeepseekV3Config has no topk_method and its model always
  // holds the bias; a checkpoint decides (AdaptToCheckpoint).
  c->router_bias_declared = r.Has("topk_method");
  RESHARD_ASSIGN_OR_RETURN(auto topk, r.String("topk_method", "greedy"));
  c->router_bias = topk == "noaux_tc" || c->arch == HfArch::kGlm4Moe ||
                   (c->arch == HfArch::kDeepseekV3 && !c->router_bias_declared);
  if (c->arch != HfArch::kDeepseekV2) {
    RESHARD_ASSIGN_OR_RETURN(c->nextn_layers,
                             r.Int("num_nextn_predict_layers", 0));
  }
  return Status::OK();
}

Status ReadMoe(const ConfigReader& r, HfConfig* c) {
  switch (c->arch) {
    case HfArch::kQwen35Moe: {
      RESHARD_ASSIGN_OR_RETURN(c->experts, ExpertCount(r));
      RESHARD_ASSIGN_OR_RETURN(c->moe_intermediate,
                               r.Int("moe_intermediate_size"));
      break;
    }
    case HfArch::kQwen3Moe:
    case HfArch::kQwen3Next: {
      RESHARD_ASSIGN_OR_RETURN(c->experts, ExpertCount(r));
      RESHARD_ASSIGN_OR_RETURN(c->moe_intermediate,
                               r.Int("moe_intermediate_size"));
      RESHARD_ASSIGN_OR_RETURN(c->decoder_sparse_step,
                               r.Int("decoder_sparse_step", 1));
      RESHARD_ASSIGN_OR_RETURN(c->mlp_only_layers, r.Ints("mlp_only_layers"));
      break;
    }
    case HfArch::kMixtral:
    case HfArch::kGptOss: {
      RESHARD_ASSIGN_OR_RETURN(c->experts, ExpertCount(r));
      c->moe_intermediate = c->intermediate;
      break;
    }
    case HfArch::kDeepseekV2:
    case HfArch::kDeepseekV3:
    case HfArch::kGlm4Moe:
      RESHARD_RETURN_NOT_OK(ReadDeepseekMoe(r, c));
      break;
    default:
      break;
  }
  if (c->decoder_sparse_step < 1 || c->moe_layer_freq < 1) {
    return Status::InvalidArgument(
        "config.json: decoder_sparse_step and moe_layer_freq must be at "
        "least 1");
  }
  return Status::OK();
}

Status ReadMla(const ConfigReader& r, HfConfig* c) {
  if (r.Has("q_lora_rank")) {
    RESHARD_ASSIGN_OR_RETURN(c->q_lora_rank, r.Int("q_lora_rank"));
  }
  RESHARD_ASSIGN_OR_RETURN(c->kv_lora_rank, r.Int("kv_lora_rank"));
  RESHARD_ASSIGN_OR_RETURN(c->qk_nope, r.Int("qk_nope_head_dim"));
  RESHARD_ASSIGN_OR_RETURN(c->qk_rope, r.Int("qk_rope_head_dim"));
  RESHARD_ASSIGN_OR_RETURN(c->v_head, r.Int("v_head_dim"));
  return Status::OK();
}

}  // namespace

bool IsSparseLayer(const HfConfig& c, int64_t l) {
  switch (c.arch) {
    case HfArch::kQwen35Moe:
      return true;
    case HfArch::kQwen3Moe:
    case HfArch::kQwen3Next:
      return c.experts > 0 &&
             std::find(c.mlp_only_layers.begin(), c.mlp_only_layers.end(), l) ==
                 c.mlp_only_layers.end() &&
             (l + 1) % c.decoder_sparse_step == 0;
    case HfArch::kMixtral:
      return true;
    case HfArch::kGptOss:
      return true;
    case HfArch::kDeepseekV2:
    case HfArch::kDeepseekV3:
    case HfArch::kGlm4Moe:
      return l >= c.first_k_dense && l % c.moe_layer_freq == 0;
    default:
      return false;
  }
}

namespace {

// Absurd sizes fail here, before anything is enumerated: every count
// bounds a loop, every dimension a tensor's bytes.
Status CheckBounds(const HfConfig& c) {
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  const std::pair<const char*, int64_t> dims[] = {
      {"hidden_size", c.hidden},
      {"vocab_size", c.vocab},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"head_dim", c.head_dim},
      {"intermediate_size", c.intermediate},
      {"moe_intermediate_size", c.moe_intermediate},
      {"q_lora_rank", c.q_lora_rank.value_or(0)},
      {"kv_lora_rank", c.kv_lora_rank},
      {"qk_nope_head_dim", c.qk_nope},
      {"qk_rope_head_dim", c.qk_rope},
      {"v_head_dim", c.v_head},
      {"linear_num_key_heads", c.lin_k_heads},
      {"linear_num_value_heads", c.lin_v_heads},
      {"linear_key_head_dim", c.lin_k_dim},
      {"linear_value_head_dim", c.lin_v_dim},
      {"linear_conv_kernel_dim", c.conv_kernel},
      {"shared_expert_intermediate_size", c.shared_expert_intermediate},
      {"quantization_config.weight_block_size", c.block_rows},
      {"quantization_config.weight_block_size", c.block_cols}};
  for (const auto& [name, v] : dims) {
    if (v > kMaxDim) {
      return Status::InvalidArgument("config.json: " + std::string(name) + " " +
                                     std::to_string(v) + " exceeds " +
                                     std::to_string(kMaxDim));
    }
  }
  const std::pair<const char*, int64_t> counts[] = {
      {"num_hidden_layers", c.layers},
      {"num_nextn_predict_layers", c.nextn_layers},
      {"the MTP layer count", c.mtp_layers},
      {"the routed expert count", c.experts},
      {"n_shared_experts", c.shared_experts}};
  for (const auto& [name, v] : counts) {
    if (v > (int64_t{1} << 16)) {
      return Status::InvalidArgument("config.json: " + std::string(name) + " " +
                                     std::to_string(v) + " exceeds 65536");
    }
  }
  if ((c.layers + c.nextn_layers + c.mtp_layers) * (3 * c.experts + 32) +
          (c.vision ? c.vision->depth * 16 : 0) >
      (int64_t{1} << 24)) {
    return Status::InvalidArgument(
        "config.json describes more than 16777216 tensors (" +
        std::to_string(c.layers + c.nextn_layers + c.mtp_layers) +
        " layers of " + std::to_string(c.experts) + " experts)");
  }
  return Status::OK();
}

// Every size the tensor lists derive from two or more config.json fields
// (a product or a sum of products), computed exactly in 128 bits: the
// fields are bounded first (CheckBounds, vision_config's 2^24), so none of
// these can overflow here, and each must be at most 2^62 (no tensor
// dimension can be larger: every tensor is under 2^62 bytes) before the
// lists compute it in 64 bits. Errors name the fields.
Status CheckDerivedSizes(const HfConfig& c) {
  using Wide = __int128;
  constexpr Wide kMax = Wide{1} << 62;
  const bool gated = IsHybrid(c.arch) && c.attn_gate;
  const bool next = c.arch == HfArch::kQwen3Next;
  std::vector<std::pair<std::string, Wide>> sizes = {
      {gated ? "num_attention_heads * head_dim * 2 (attn_output_gate)"
             : "num_attention_heads * head_dim",
       Wide{c.heads} * c.head_dim * (gated ? 2 : 1)},
      {"num_key_value_heads * head_dim", Wide{c.kv_heads} * c.head_dim},
      {"n_shared_experts * moe_intermediate_size",
       Wide{c.shared_experts} * c.moe_intermediate}};
  if (UsesMla(c.arch)) {
    sizes.push_back(
        {"num_attention_heads * (qk_nope_head_dim + "
         "qk_rope_head_dim)",
         Wide{c.heads} * (Wide{c.qk_nope} + c.qk_rope)});
    sizes.push_back({"num_attention_heads * (qk_nope_head_dim + v_head_dim)",
                     Wide{c.heads} * (Wide{c.qk_nope} + c.v_head)});
  }
  if (IsHybrid(c.arch)) {
    sizes.push_back(
        {next ? "2 * linear_num_key_heads * linear_key_head_dim + 2 * "
                "linear_num_value_heads * linear_value_head_dim"
              : "2 * linear_num_key_heads * linear_key_head_dim + "
                "linear_num_value_heads * linear_value_head_dim",
         2 * Wide{c.lin_k_heads} * c.lin_k_dim +
             (next ? 2 : 1) * Wide{c.lin_v_heads} * c.lin_v_dim});
  }
  if (c.vision) {
    const HfConfig::Vision& v = *c.vision;
    sizes.push_back(
        {"vision_config.hidden_size * "
         "vision_config.spatial_merge_size^2",
         Wide{v.hidden} * v.merge * v.merge});
  }
  for (const auto& [fields, value] : sizes) {
    if (value > kMax) {
      return Status::InvalidArgument("config.json: " + fields +
                                     " exceeds 2^62");
    }
  }
  return Status::OK();
}

// gpt-oss without its MXFP4 experts (a dequantized export) stores them
// in another layout; MXFP4 packs inputs in blocks of 32.
Status CheckPacking(const HfConfig& c) {
  if (!c.mxfp4) return Status::OK();
  if (c.hidden % 32 != 0 || c.intermediate % 32 != 0) {
    return Status::InvalidArgument(
        "config.json: GptOssForCausalLM's MXFP4 experts need hidden_size and "
        "intermediate_size multiples of 32");
  }
  return Status::OK();
}

// Qwen3.5's vision-language configs nest the language model's fields in
// text_config; the text-only classes may (a vision-language config with
// its architecture renamed) or may not (transformers' own save).
bool NestedConfig(const HfConfig& c, const ConfigReader& top) {
  if (c.arch != HfArch::kQwen35 && c.arch != HfArch::kQwen35Moe) return false;
  return !c.text_only || top.Has("text_config");
}

// Qwen3.5's text_config (the language model's fields) and vision_config;
// every other architecture's fields are top-level. `text` is set to the
// reader of the language model's fields.
Status ReadNested(const ConfigReader& top, HfConfig* c,
                  std::optional<ConfigReader>* text) {
  if (!NestedConfig(*c, top)) {
    text->emplace(top.object());
    return Status::OK();
  }
  simdjson::dom::object t;
  if (top.object()["text_config"].get_object().get(t) != 0) {
    return Status::InvalidArgument("config.json: " + c->architecture +
                                   " needs a text_config object");
  }
  text->emplace(t);
  // The text-only classes hold the language model under model.*.
  if (!c->text_only) c->lm_prefix = "model.language_model.";
  return Status::OK();
}

// The vision tower of the vision-language classes (never of the text-only
// ones, whatever vision_config a renamed config keeps).
Status ReadVision(const ConfigReader& top, HfConfig* c) {
  simdjson::dom::object v;
  if (!top.Has("vision_config") || !NestedConfig(*c, top) || c->text_only) {
    return Status::OK();
  }
  if (top.object()["vision_config"].get_object().get(v) != 0) {
    return Status::InvalidArgument(
        "config.json: vision_config must be an object");
  }
  return ReadVisionConfig(ConfigReader(v), c);
}

// The top-level dtype and tie_word_embeddings of a nested config win over
// (or stand in for) text_config's.
Status ReadTopLevelOverrides(const ConfigReader& top, HfConfig* c) {
  if (!NestedConfig(*c, top)) return Status::OK();
  if (top.Has("tie_word_embeddings")) {
    RESHARD_ASSIGN_OR_RETURN(c->tie_word_embeddings,
                             top.Bool("tie_word_embeddings", false));
  }
  if (top.Has("torch_dtype") || top.Has("dtype")) {
    RESHARD_ASSIGN_OR_RETURN(std::string dtype, ReadDtype(top, c->dtype));
    if (FindSafetensorsDtypeByPlacement(dtype) == nullptr) {
      return Status::InvalidArgument("config.json: unknown torch_dtype " +
                                     Printable(dtype));
    }
    c->dtype = dtype;
  }
  return Status::OK();
}

}  // namespace

Result<HfConfig> ParseHfConfig(std::string_view json) {
  RESHARD_ASSIGN_OR_RETURN(auto doc, JsonDocument::Parse(json));
  simdjson::dom::object obj;
  if (doc.root().get_object().get(obj) != simdjson::SUCCESS) {
    return Status::InvalidArgument("config.json must be a JSON object");
  }
  // Readers that take the first or the last of two equal keys disagree on
  // what the file means: refuse it, like every other input.
  RESHARD_RETURN_NOT_OK(
      RejectDuplicateKeys(doc.root(), JsonPath()).WithContext("config.json"));
  ConfigReader top(obj);
  HfConfig c;
  RESHARD_RETURN_NOT_OK(ReadArchitecture(top, &c));
  RESHARD_ASSIGN_OR_RETURN(c.model_type, top.String("model_type", ""));
  std::optional<ConfigReader> text;
  RESHARD_RETURN_NOT_OK(ReadNested(top, &c, &text));
  const ConfigReader& r = *text;
  RESHARD_RETURN_NOT_OK(ReadDims(r, &c));
  RESHARD_RETURN_NOT_OK(ReadTopLevelOverrides(top, &c));
  RESHARD_ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
  RESHARD_ASSIGN_OR_RETURN(c.mlp_bias, r.Bool("mlp_bias", false));
  RESHARD_ASSIGN_OR_RETURN(c.qk_norm, r.Bool("use_qk_norm", false));
  RESHARD_RETURN_NOT_OK(ReadMoe(r, &c));
  if (UsesMla(c.arch)) RESHARD_RETURN_NOT_OK(ReadMla(r, &c));
  if (IsHybrid(c.arch)) RESHARD_RETURN_NOT_OK(ReadHybridConfig(r, &c));
  RESHARD_RETURN_NOT_OK(ReadVision(top, &c));
  RESHARD_RETURN_NOT_OK(ReadQuantization(top, &c));
  RESHARD_RETURN_NOT_OK(CheckPacking(c));
  // Qwen's FP8 releases store their block scales in BF16, DeepSeek's in F32.
  if (c.arch == HfArch::kQwen2 || c.arch == HfArch::kQwen3 ||
      c.arch == HfArch::kQwen3Moe || IsHybrid(c.arch)) {
    c.scale_dtype = "bfloat16";
  }
  RESHARD_RETURN_NOT_OK(CheckBounds(c));
  RESHARD_RETURN_NOT_OK(CheckDerivedSizes(c));
  return c;
}

namespace {

// The decimal number `name` starts with, followed by a dot; -1 if none
// (or past 6 digits: CheckBounds' limits are far below).
int64_t LeadingIndex(std::string_view name) {
  int64_t k = 0;
  size_t i = 0;
  for (; i < name.size() && i < 6 && name[i] >= '0' && name[i] <= '9'; ++i) {
    k = k * 10 + (name[i] - '0');
  }
  return i > 0 && i < name.size() && name[i] == '.' ? k : -1;
}

// The MTP layer count a checkpoint holds: one past the largest N of its
// mtp.layers.N.* tensors (Qwen3-Next, Qwen3.5).
int64_t CheckpointMtpLayers(const HfCheckpoint& ckpt) {
  constexpr std::string_view kMtp = "mtp.layers.";
  int64_t n = 0;
  for (const CheckpointTensor& t : ckpt.tensors()) {
    std::string_view name = t.name;
    if (!name.starts_with(kMtp)) continue;
    n = std::max(n, LeadingIndex(name.substr(kMtp.size())) + 1);
  }
  return n;
}

// Whether the checkpoint holds any tensor of an MTP layer: mtp.* (hybrid)
// or model.layers.N.* with N past the decoder layers (DeepSeek-V3,
// GLM-4.5).
bool HoldsMtp(const HfCheckpoint& ckpt, const HfConfig& c) {
  constexpr std::string_view kLayers = "model.layers.";
  for (const CheckpointTensor& t : ckpt.tensors()) {
    std::string_view name = t.name;
    if (IsHybrid(c.arch)) {
      if (name.starts_with("mtp.")) return true;
    } else if (name.starts_with(kLayers) &&
               LeadingIndex(name.substr(kLayers.size())) >= c.layers) {
      return true;
    }
  }
  return false;
}

// The first sparse decoder layer, or -1.
int64_t FirstSparseLayer(const HfConfig& c) {
  for (int64_t l = 0; l < c.layers; ++l) {
    if (IsSparseLayer(c, l)) return l;
  }
  return -1;
}

}  // namespace

Status AdaptToCheckpoint(const HfCheckpoint& ckpt, HfConfig* c) {
  c->stored_tied_head =
      c->tie_word_embeddings && ckpt.FindTensor("lm_head.weight") != nullptr;
  // MTP layers: none when the checkpoint holds none (transformers' classes
  // have none, whatever config.json counts); else the config's count (a
  // partial layer then fails naming what it lacks) or, uncounted, what
  // the checkpoint holds.
  const bool mtp = HoldsMtp(ckpt, *c);
  if (!mtp) {
    c->nextn_layers = 0;
    c->mtp_layers = 0;
  } else if (IsHybrid(c->arch) && !c->mtp_declared) {
    c->mtp_layers = CheckpointMtpLayers(ckpt);
  }
  const int64_t sparse = FirstSparseLayer(*c);
  if (c->experts > 0 && c->arch != HfArch::kGptOss && sparse >= 0) {
    const std::string layer = c->lm_prefix + "layers." + std::to_string(sparse);
    c->fused_experts =
        ckpt.FindTensor(layer + ".mlp.experts.gate_up_proj") != nullptr;
    const std::string mtp_layer =
        IsHybrid(c->arch) ? "mtp.layers.0"
                          : "model.layers." + std::to_string(c->layers);
    c->fused_mtp_experts =
        ckpt.FindTensor(mtp_layer + ".mlp.experts.gate_up_proj") != nullptr;
    // DeepSeek-V3 without topk_method: the bias when the checkpoint holds
    // it (transformers' saves do).
    if (c->arch == HfArch::kDeepseekV3 && !c->router_bias_declared) {
      c->router_bias =
          ckpt.FindTensor(layer + ".mlp.gate.e_score_correction_bias") !=
          nullptr;
    }
  }
  if (c->vision) {
    bool any = false;
    for (const CheckpointTensor& t : ckpt.tensors()) {
      any |= t.name.starts_with("model.visual.");
    }
    if (!any) c->vision.reset();  // a text-only export
  }
  return CheckBounds(*c);
}

bool QuantizesLinear(const HfConfig& c, std::string_view name) {
  if (c.fp8) return true;
  if (!c.fp8_channel) return false;
  // compressed-tensors names modules: the weight's name less ".weight".
  std::string_view module = name;
  if (module.ends_with(".weight")) module.remove_suffix(7);
  return c.quant_ignore == nullptr || !c.quant_ignore->Ignores(module);
}

}  // namespace reshard::internal
