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
    w.KeyString("fragment_id", f.fragment_id());
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

using internal::JsonElement;
using internal::JsonPath;

Result<uint64_t> ReadU64Field(const internal::StrictObject& obj,
                              std::string_view key, const JsonPath& path) {
  return internal::ReadU64(obj.Get(key), path.Field(key));
}

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
  RESHARD_ASSIGN_OR_RETURN(
      s.placement_fragment_id,
      internal::ReadIdField(obj, "placement_fragment_id", path));
  RESHARD_ASSIGN_OR_RETURN(s.fragment_id,
                           internal::ReadIdField(obj, "fragment_id", path));
  RESHARD_ASSIGN_OR_RETURN(s.address, ReadU64Field(obj, "address", path));
  RESHARD_ASSIGN_OR_RETURN(s.nbytes, ReadU64Field(obj, "nbytes", path));
  RESHARD_ASSIGN_OR_RETURN(s.worker_id,
                           internal::ReadIdField(obj, "worker_id", path));
  RESHARD_ASSIGN_OR_RETURN(s.endpoint,
                           internal::ReadIdField(obj, "endpoint", path));
  RESHARD_ASSIGN_OR_RETURN(s.device,
                           internal::ReadIdField(obj, "device", path));
  RESHARD_ASSIGN_OR_RETURN(
      s.itemsize,
      internal::ReadInt(obj.Get("itemsize"), path.Field("itemsize")));
  RESHARD_ASSIGN_OR_RETURN(s.local_shape,
                           internal::ReadIntArray(obj.Get("local_shape"),
                                                  path.Field("local_shape")));
  RESHARD_ASSIGN_OR_RETURN(s.strides_bytes,
                           internal::ReadIntArray(obj.Get("strides_bytes"),
                                                  path.Field("strides_bytes")));
  RESHARD_ASSIGN_OR_RETURN(s.storage_address,
                           ReadU64Field(obj, "storage_address", path));
  RESHARD_ASSIGN_OR_RETURN(s.storage_nbytes,
                           ReadU64Field(obj, "storage_nbytes", path));
  RESHARD_ASSIGN_OR_RETURN(s.storage_offset_bytes,
                           ReadU64Field(obj, "storage_offset_bytes", path));
  auto f = RuntimeBindingFragment::Make(std::move(s));
  if (!f.ok()) return f.status().WithContext(path.ToString());
  return f;
}

}  // namespace

Result<WeightRuntimeBindingManifest> WeightRuntimeBindingFromJson(
    std::string_view json) {
  RESHARD_ASSIGN_OR_RETURN(auto doc, internal::JsonDocument::Parse(json));
  JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto obj, internal::StrictObject::Make(
                    doc.root(), root, "runtime binding manifest",
                    {"fragments", "generation", "instance_id", "lease_id",
                     "participant_id", "placement_digest", "placement_id",
                     "resource_id", "resource_kind", "revision"}));
  RESHARD_ASSIGN_OR_RETURN(std::string_view kind,
                           internal::ReadString(obj.Get("resource_kind"),
                                                root.Field("resource_kind")));
  if (kind != WeightRuntimeBindingManifest::kResourceKind) {
    return Status::InvalidArgument(
        "runtime binding resource_kind must be model_weight, got \"" +
        std::string(kind) + "\"");
  }
  WeightRuntimeBindingManifestSpec s;
  RESHARD_ASSIGN_OR_RETURN(s.resource_id,
                           internal::ReadIdField(obj, "resource_id", root));
  RESHARD_ASSIGN_OR_RETURN(s.placement_id,
                           internal::ReadIdField(obj, "placement_id", root));
  RESHARD_ASSIGN_OR_RETURN(
      s.placement_digest, internal::ReadIdField(obj, "placement_digest", root));
  RESHARD_ASSIGN_OR_RETURN(s.instance_id,
                           internal::ReadIdField(obj, "instance_id", root));
  RESHARD_ASSIGN_OR_RETURN(s.generation, ReadU64Field(obj, "generation", root));
  RESHARD_ASSIGN_OR_RETURN(s.lease_id,
                           internal::ReadIdField(obj, "lease_id", root));
  RESHARD_ASSIGN_OR_RETURN(s.revision,
                           internal::ReadIdField(obj, "revision", root));
  RESHARD_ASSIGN_OR_RETURN(s.participant_id,
                           internal::ReadIdField(obj, "participant_id", root));
  JsonPath fp = root.Field("fragments");
  RESHARD_ASSIGN_OR_RETURN(auto arr,
                           internal::ReadArray(obj.Get("fragments"), fp));
  size_t i = 0;
  for (auto item : arr) {
    RESHARD_ASSIGN_OR_RETURN(auto f, ReadRuntimeFragment(item, fp.Index(i++)));
    s.fragments.push_back(std::move(f));
  }
  return WeightRuntimeBindingManifest::Make(std::move(s));
}

}  // namespace reshard
