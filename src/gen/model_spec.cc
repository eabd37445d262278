// Strict decoder of model spec files (docs/model-spec.md).

#include "reshard/gen.h"
#include "util/json_reader.h"

namespace reshard {
namespace {

using internal::JsonElement;
using internal::JsonPath;
using internal::StrictObject;

// Reads a positive integer field.
Status ReadPositive(const StrictObject& obj, std::string_view key,
                    const JsonPath& path, int64_t* out) {
  auto v = internal::ReadInt(obj.Get(key), path.Field(key));
  if (!v.ok()) return v.status();
  if (*v < 1) {
    return Status::InvalidArgument(path.Field(key).ToString() +
                                   " must be >= 1");
  }
  *out = *v;
  return Status::OK();
}

Status ReadAttention(JsonElement e, const JsonPath& path, ModelSpec* m) {
  if (e.type() != simdjson::dom::element_type::OBJECT) {
    return Status::InvalidArgument(path.ToString() + " must be a JSON object");
  }
  auto kind = e["kind"];
  if (kind.error() || kind.type() != simdjson::dom::element_type::STRING) {
    return Status::InvalidArgument(path.Field("kind").ToString() +
                                   " must be \"gqa\" or \"mla\"");
  }
  m->attention = std::string(std::string_view(kind.value()));
  if (m->attention == "gqa") {
    RESHARD_ASSIGN_OR_RETURN(
        auto obj, StrictObject::Make(
                      e, path, "gqa attention",
                      {"head_dim", "heads", "kind", "kv_heads", "qk_norm"}));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "heads", path, &m->heads));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "kv_heads", path, &m->kv_heads));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "head_dim", path, &m->head_dim));
    RESHARD_ASSIGN_OR_RETURN(
        m->qk_norm,
        internal::ReadBool(obj.Get("qk_norm"), path.Field("qk_norm")));
    return Status::OK();
  }
  if (m->attention == "mla") {
    RESHARD_ASSIGN_OR_RETURN(
        auto obj, StrictObject::Make(
                      e, path, "mla attention",
                      {"heads", "kind", "kv_lora_rank", "q_lora_rank",
                       "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "heads", path, &m->heads));
    RESHARD_RETURN_NOT_OK(
        ReadPositive(obj, "q_lora_rank", path, &m->q_lora_rank));
    RESHARD_RETURN_NOT_OK(
        ReadPositive(obj, "kv_lora_rank", path, &m->kv_lora_rank));
    RESHARD_RETURN_NOT_OK(
        ReadPositive(obj, "qk_nope_head_dim", path, &m->qk_nope_head_dim));
    RESHARD_RETURN_NOT_OK(
        ReadPositive(obj, "qk_rope_head_dim", path, &m->qk_rope_head_dim));
    RESHARD_RETURN_NOT_OK(
        ReadPositive(obj, "v_head_dim", path, &m->v_head_dim));
    return Status::OK();
  }
  return Status::InvalidArgument(path.Field("kind").ToString() +
                                 " must be \"gqa\" or \"mla\", got \"" +
                                 m->attention + "\"");
}

}  // namespace

Result<ModelSpec> ModelSpecFromJson(std::string_view json) {
  RESHARD_ASSIGN_OR_RETURN(auto doc, internal::JsonDocument::Parse(json));
  JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto obj, StrictObject::Make(doc.root(), root, "model spec",
                                   {"attention", "dtype", "hidden", "itemsize",
                                    "layers", "name", "vocab"},
                                   {"mlp", "moe"}));
  ModelSpec m;
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view name,
      internal::ReadNonEmptyString(obj.Get("name"), root.Field("name")));
  m.name = name;
  RESHARD_ASSIGN_OR_RETURN(
      std::string_view dtype,
      internal::ReadNonEmptyString(obj.Get("dtype"), root.Field("dtype")));
  m.dtype = dtype;
  RESHARD_RETURN_NOT_OK(ReadPositive(obj, "itemsize", root, &m.itemsize));
  RESHARD_RETURN_NOT_OK(ReadPositive(obj, "layers", root, &m.layers));
  RESHARD_RETURN_NOT_OK(ReadPositive(obj, "hidden", root, &m.hidden));
  RESHARD_RETURN_NOT_OK(ReadPositive(obj, "vocab", root, &m.vocab));
  RESHARD_RETURN_NOT_OK(
      ReadAttention(obj.Get("attention"), root.Field("attention"), &m));
  if (auto mlp = obj.Find("mlp")) {
    JsonPath p = root.Field("mlp");
    RESHARD_ASSIGN_OR_RETURN(
        auto mo, StrictObject::Make(*mlp, p, "dense mlp", {"intermediate"}));
    RESHARD_RETURN_NOT_OK(ReadPositive(mo, "intermediate", p, &m.intermediate));
  }
  if (auto moe = obj.Find("moe")) {
    JsonPath p = root.Field("moe");
    RESHARD_ASSIGN_OR_RETURN(
        auto mo,
        StrictObject::Make(*moe, p, "moe",
                           {"dense_layers", "experts", "moe_intermediate",
                            "router_bias", "shared_experts"}));
    RESHARD_RETURN_NOT_OK(ReadPositive(mo, "experts", p, &m.experts));
    RESHARD_RETURN_NOT_OK(
        ReadPositive(mo, "moe_intermediate", p, &m.moe_intermediate));
    RESHARD_ASSIGN_OR_RETURN(
        m.shared_experts,
        internal::ReadInt(mo.Get("shared_experts"), p.Field("shared_experts")));
    RESHARD_ASSIGN_OR_RETURN(
        m.dense_layers,
        internal::ReadInt(mo.Get("dense_layers"), p.Field("dense_layers")));
    RESHARD_ASSIGN_OR_RETURN(
        m.router_bias,
        internal::ReadBool(mo.Get("router_bias"), p.Field("router_bias")));
    if (m.shared_experts < 0 || m.dense_layers < 0 ||
        m.dense_layers > m.layers) {
      return Status::InvalidArgument(
          "moe.shared_experts must be >= 0 and moe.dense_layers in [0, "
          "layers]");
    }
  }
  const bool needs_dense = m.experts == 0 || m.dense_layers > 0;
  if (needs_dense && m.intermediate == 0) {
    return Status::InvalidArgument(
        "model spec needs mlp.intermediate for its dense layers");
  }
  return m;
}

}  // namespace reshard
