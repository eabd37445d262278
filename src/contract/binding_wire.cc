// Canonical wire of runtime bindings (see docs/wire-format.md).

#include "reshard/binding.h"
#include "util/canonical_json.h"
#include "util/json_reader.h"

namespace reshard {

std::string WeightRuntimeBindingToJson(const WeightRuntimeBindingManifest& b) {
  std::string out;
  internal::CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.Key("fragments");
  w.BeginArray();
  for (const auto& f : b.fragments()) {
    w.BeginObject();
    w.KeyUInt("address", f.address());
    w.KeyString("device", f.device());
    w.KeyString("endpoint", f.endpoint());
    w.KeyString("fragment_id", f.runtime_fragment_id());
    w.KeyInt("itemsize", f.itemsize());
    w.Key("local_shape");
    w.IntArray(f.local_shape());
    w.KeyUInt("nbytes", f.nbytes());
    w.KeyString("placement_fragment_id", f.placement_fragment_id());
    w.KeyUInt("storage_address", f.storage_address());
    w.KeyUInt("storage_nbytes", f.storage_nbytes());
    w.KeyUInt("storage_offset_bytes", f.storage_offset_bytes());
    w.Key("strides_bytes");
    w.IntArray(f.strides_bytes());
    w.KeyString("worker_id", f.worker_id());
    w.EndObject();
  }
  w.EndArray();
  w.KeyUInt("generation", b.generation());
  w.KeyString("instance_id", b.instance_id());
  w.KeyString("lease_id", b.lease_id());
  w.KeyString("participant_id", b.participant_id());
  w.KeyString("placement_digest", b.placement_digest());
  w.KeyString("placement_id", b.placement_id());
  w.KeyString("resource_id", b.resource_id());
  w.KeyString("resource_kind", WeightRuntimeBindingManifest::kResourceKind);
  w.KeyString("revision", b.revision());
  w.EndObject();
  return out;
}

namespace {

using internal::JsonArray;
using internal::JsonElement;
using internal::JsonPath;

Result<RuntimeBindingFragment> ReadRuntimeFragment(JsonElement e,
                                                   const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto obj, internal::StrictObject::Make(
                    e, path, "runtime binding fragment",
                    {"address", "device", "endpoint", "fragment_id", "itemsize",
                     "local_shape", "nbytes", "placement_fragment_id",
                     "storage_address", "storage_nbytes",
                     "storage_offset_bytes", "strides_bytes", "worker_id"}));
  RuntimeBindingFragmentSpec s;
  RESHARD_ASSIGN_OR_RETURN(s.placement_fragment_id,
                           obj.Id("placement_fragment_id"));
  RESHARD_ASSIGN_OR_RETURN(s.runtime_fragment_id, obj.Id("fragment_id"));
  RESHARD_ASSIGN_OR_RETURN(s.address, obj.U64("address"));
  RESHARD_ASSIGN_OR_RETURN(s.nbytes, obj.U64("nbytes"));
  RESHARD_ASSIGN_OR_RETURN(s.worker_id, obj.Id("worker_id"));
  RESHARD_ASSIGN_OR_RETURN(s.endpoint, obj.Id("endpoint"));
  RESHARD_ASSIGN_OR_RETURN(s.device, obj.Id("device"));
  RESHARD_ASSIGN_OR_RETURN(s.itemsize, obj.I64("itemsize"));
  RESHARD_ASSIGN_OR_RETURN(s.local_shape, obj.IntArray("local_shape"));
  RESHARD_ASSIGN_OR_RETURN(s.strides_bytes, obj.IntArray("strides_bytes"));
  RESHARD_ASSIGN_OR_RETURN(s.storage_address, obj.U64("storage_address"));
  RESHARD_ASSIGN_OR_RETURN(s.storage_nbytes, obj.U64("storage_nbytes"));
  RESHARD_ASSIGN_OR_RETURN(s.storage_offset_bytes,
                           obj.U64("storage_offset_bytes"));
  auto f = RuntimeBindingFragment::Make(std::move(s));
  if (!f.ok()) return f.status().WithContext(path.ToString());
  return f;
}

}  // namespace

Result<WeightRuntimeBindingManifest> WeightRuntimeBindingFromJson(
    std::string_view json) {
  RESHARD_ASSIGN_OR_RETURN(auto doc, internal::JsonDocument::Parse(json));
  const JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto obj, internal::StrictObject::Make(
                    doc.root(), root, "runtime binding manifest",
                    {"fragments", "generation", "instance_id", "lease_id",
                     "participant_id", "placement_digest", "placement_id",
                     "resource_id", "resource_kind", "revision"}));
  RESHARD_ASSIGN_OR_RETURN(std::string_view kind, obj.String("resource_kind"));
  if (kind != WeightRuntimeBindingManifest::kResourceKind) {
    return Status::InvalidArgument(
        "runtime binding resource_kind must be model_weight, got \"" +
        std::string(kind) + "\"");
  }
  WeightRuntimeBindingManifestSpec s;
  RESHARD_ASSIGN_OR_RETURN(s.resource_id, obj.Id("resource_id"));
  RESHARD_ASSIGN_OR_RETURN(s.placement_id, obj.Id("placement_id"));
  RESHARD_ASSIGN_OR_RETURN(s.placement_digest, obj.Id("placement_digest"));
  RESHARD_ASSIGN_OR_RETURN(s.instance_id, obj.Id("instance_id"));
  RESHARD_ASSIGN_OR_RETURN(s.generation, obj.U64("generation"));
  RESHARD_ASSIGN_OR_RETURN(s.lease_id, obj.Id("lease_id"));
  RESHARD_ASSIGN_OR_RETURN(s.revision, obj.Id("revision"));
  RESHARD_ASSIGN_OR_RETURN(s.participant_id, obj.Id("participant_id"));
  RESHARD_ASSIGN_OR_RETURN(JsonArray fragments, obj.Array("fragments"));
  RESHARD_RETURN_NOT_OK(fragments.ForEach(
      [&](JsonElement item, const JsonPath& item_path) -> Status {
        RESHARD_ASSIGN_OR_RETURN(auto f, ReadRuntimeFragment(item, item_path));
        s.fragments.push_back(std::move(f));
        return Status::OK();
      }));
  return WeightRuntimeBindingManifest::Make(std::move(s));
}

}  // namespace reshard
