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
                    int64_t* out) {
  auto v = obj.I64(key);
  if (!v.ok()) return v.status();
  if (*v < 1) {
    return Status::InvalidArgument(obj.FieldPath(key).ToString() +
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
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "heads", &m->heads));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "kv_heads", &m->kv_heads));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "head_dim", &m->head_dim));
    RESHARD_ASSIGN_OR_RETURN(m->qk_norm, obj.Bool("qk_norm"));
    return Status::OK();
  }
  if (m->attention == "mla") {
    RESHARD_ASSIGN_OR_RETURN(
        auto obj, StrictObject::Make(
                      e, path, "mla attention",
                      {"heads", "kind", "kv_lora_rank", "q_lora_rank",
                       "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "heads", &m->heads));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "q_lora_rank", &m->q_lora_rank));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "kv_lora_rank", &m->kv_lora_rank));
    RESHARD_RETURN_NOT_OK(
        ReadPositive(obj, "qk_nope_head_dim", &m->qk_nope_head_dim));
    RESHARD_RETURN_NOT_OK(
        ReadPositive(obj, "qk_rope_head_dim", &m->qk_rope_head_dim));
    RESHARD_RETURN_NOT_OK(ReadPositive(obj, "v_head_dim", &m->v_head_dim));
    return Status::OK();
  }
  return Status::InvalidArgument(path.Field("kind").ToString() +
                                 " must be \"gqa\" or \"mla\", got \"" +
                                 m->attention + "\"");
}

}  // namespace

Result<ModelSpec> ModelSpecFromJson(std::string_view json) {
  RESHARD_ASSIGN_OR_RETURN(auto doc, internal::JsonDocument::Parse(json));
  const JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto obj, StrictObject::Make(doc.root(), root, "model spec",
                                   {"attention", "dtype", "hidden", "itemsize",
                                    "layers", "name", "vocab"},
                                   {"mlp", "moe"}));
  ModelSpec m;
  RESHARD_ASSIGN_OR_RETURN(m.name, obj.Id("name"));
  RESHARD_ASSIGN_OR_RETURN(m.dtype, obj.Id("dtype"));
  RESHARD_RETURN_NOT_OK(ReadPositive(obj, "itemsize", &m.itemsize));
  RESHARD_RETURN_NOT_OK(ReadPositive(obj, "layers", &m.layers));
  RESHARD_RETURN_NOT_OK(ReadPositive(obj, "hidden", &m.hidden));
  RESHARD_RETURN_NOT_OK(ReadPositive(obj, "vocab", &m.vocab));
  RESHARD_RETURN_NOT_OK(
      ReadAttention(obj.Get("attention"), obj.FieldPath("attention"), &m));
  if (obj.Has("mlp")) {
    RESHARD_ASSIGN_OR_RETURN(auto mo,
                             obj.Object("mlp", "dense mlp", {"intermediate"}));
    RESHARD_RETURN_NOT_OK(ReadPositive(mo, "intermediate", &m.intermediate));
  }
  if (obj.Has("moe")) {
    RESHARD_ASSIGN_OR_RETURN(
        auto mo, obj.Object("moe", "moe",
                            {"dense_layers", "experts", "moe_intermediate",
                             "router_bias", "shared_experts"}));
    RESHARD_RETURN_NOT_OK(ReadPositive(mo, "experts", &m.experts));
    RESHARD_RETURN_NOT_OK(
        ReadPositive(mo, "moe_intermediate", &m.moe_intermediate));
    RESHARD_ASSIGN_OR_RETURN(m.shared_experts, mo.I64("shared_experts"));
    RESHARD_ASSIGN_OR_RETURN(m.dense_layers, mo.I64("dense_layers"));
    RESHARD_ASSIGN_OR_RETURN(m.router_bias, mo.Bool("router_bias"));
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
