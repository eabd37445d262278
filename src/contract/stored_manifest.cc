// StoredWeightManifest: factory, validation (rule 63 of
// docs/validation-rules.md) and JSON.

#include "reshard/stored_manifest.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "contract/fragment_geometry.h"
#include "contract/placement_codec.h"
#include "util/box_cover.h"
#include "util/json_reader.h"
#include "util/sha256.h"
#include "util/sorted_find.h"

namespace reshard {
namespace {

constexpr std::string_view kManifestSuffix = "/manifest";

Status CheckStoredFragment(const TensorDescriptor& t, const StoredFragment& f) {
  // Same geometry rules as placement fragments (rules 7-10).
  PlacementFragmentSpec spec{
      f.tensor_id, f.global_offset, f.local_shape,       f.nbytes,
      {},          f.aliases,       f.stored_fragment_id};
  auto pf = PlacementFragment::Make(std::move(spec));
  if (!pf.ok()) return pf.status();
  return internal::CheckFragmentGeometry(t, *pf);
}

using FragmentsByTensor = std::vector<std::vector<const StoredFragment*>>;

// Ids are non-empty, and the manifest key is "<group_id>/manifest": the
// revision's other keys (transactions, checksums, leases) are derived from
// group_id, so it must be the manifest's own group. Returns the prefix every
// payload object key must extend.
Result<std::string> CheckKeyScheme(const StoredWeightManifestSpec& s) {
  const std::pair<const char*, const std::string*> ids[] = {
      {"namespace", &s.namespace_},      {"resource_id", &s.resource_id},
      {"revision", &s.revision},         {"group_id", &s.group_id},
      {"manifest_key", &s.manifest_key}, {"created_at", &s.created_at}};
  for (const auto& [name, v] : ids) {
    if (v->empty()) {
      return Status::InvalidArgument(std::string("stored manifest ") + name +
                                     " must be a non-empty string");
    }
  }
  const std::string& key = s.manifest_key;
  if (key.size() <= kManifestSuffix.size() ||
      key.compare(key.size() - kManifestSuffix.size(), kManifestSuffix.size(),
                  kManifestSuffix) != 0) {
    return Status::InvalidArgument(
        "manifest_key must use the canonical manifest suffix: " + key);
  }
  if (key != s.group_id + std::string(kManifestSuffix)) {
    return Status::InvalidArgument("manifest_key must be <group_id>" +
                                   std::string(kManifestSuffix) + ": " + key +
                                   " (group_id " + s.group_id + ")");
  }
  return key.substr(0, key.size() - kManifestSuffix.size()) + "/payload/";
}

// Sorts tensors by id and fragments by fragment_id (aliases sorted too) and
// rejects duplicate tensor ids and an empty manifest.
Status SortAndCheckTensors(StoredWeightManifestSpec* s) {
  std::sort(s->tensors.begin(), s->tensors.end(),
            [](const auto& a, const auto& b) {
              return a.tensor_id() < b.tensor_id();
            });
  for (size_t i = 1; i < s->tensors.size(); ++i) {
    if (s->tensors[i].tensor_id() == s->tensors[i - 1].tensor_id()) {
      return Status::InvalidArgument("duplicate tensor_id: " +
                                     s->tensors[i].tensor_id());
    }
  }
  if (s->tensors.empty() || s->fragments.empty()) {
    return Status::InvalidArgument(
        "stored manifest must contain tensors and fragments");
  }
  for (auto& f : s->fragments) std::sort(f.aliases.begin(), f.aliases.end());
  std::sort(s->fragments.begin(), s->fragments.end(),
            [](const auto& a, const auto& b) {
              return a.stored_fragment_id < b.stored_fragment_id;
            });
  return Status::OK();
}

// Each fragment on its own: unique id, payload key inside the manifest's
// group, a known tensor, the placement geometry rules. Groups the fragments
// by tensor.
Result<FragmentsByTensor> CheckFragments(
    const StoredWeightManifestSpec& s, const std::string& payload_prefix,
    const std::unordered_map<std::string_view, size_t>& index) {
  FragmentsByTensor by_tensor(s.tensors.size());
  for (size_t i = 0; i < s.fragments.size(); ++i) {
    const StoredFragment& f = s.fragments[i];
    if (i > 0 &&
        f.stored_fragment_id == s.fragments[i - 1].stored_fragment_id) {
      return Status::InvalidArgument("duplicate fragment_id: " +
                                     f.stored_fragment_id);
    }
    if (f.object_key.compare(0, payload_prefix.size(), payload_prefix) != 0 ||
        f.object_key.size() == payload_prefix.size()) {
      return Status::InvalidArgument(
          "payload object_key does not belong to manifest group: " +
          f.object_key + " (fragment " + f.stored_fragment_id + ")");
    }
    auto it = index.find(f.tensor_id);
    if (it == index.end()) {
      return Status::InvalidArgument("unknown tensor_id " + f.tensor_id +
                                     " in stored fragment " +
                                     f.stored_fragment_id);
    }
    RESHARD_RETURN_NOT_OK(CheckStoredFragment(s.tensors[it->second], f));
    by_tensor[it->second].push_back(&f);
  }
  return by_tensor;
}

// Unique geometry per tensor and an exact cover of every tensor.
Status CheckExactCover(const StoredWeightManifestSpec& s,
                       FragmentsByTensor* by_tensor) {
  std::vector<internal::BoxRef> boxes;
  for (size_t t = 0; t < s.tensors.size(); ++t) {
    auto& frags = (*by_tensor)[t];
    if (frags.empty()) {
      return Status::InvalidArgument("tensor is not fully covered: " +
                                     s.tensors[t].tensor_id());
    }
    std::sort(frags.begin(), frags.end(), [](const auto* a, const auto* b) {
      return std::tie(a->global_offset, a->local_shape) <
             std::tie(b->global_offset, b->local_shape);
    });
    boxes.clear();
    for (size_t i = 0; i < frags.size(); ++i) {
      if (i > 0 && frags[i]->global_offset == frags[i - 1]->global_offset &&
          frags[i]->local_shape == frags[i - 1]->local_shape) {
        return Status::InvalidArgument(
            "duplicate fragment geometry: " + frags[i]->stored_fragment_id +
            " and " + frags[i - 1]->stored_fragment_id + " (tensor " +
            s.tensors[t].tensor_id() + ")");
      }
      boxes.push_back(
          {frags[i]->global_offset.data(), frags[i]->local_shape.data()});
    }
    if (!internal::ExactlyCovers(s.tensors[t].global_shape(), boxes)) {
      return Status::InvalidArgument("tensor is not fully covered: " +
                                     s.tensors[t].tensor_id());
    }
  }
  return Status::OK();
}

// Alias groups: every member has a fragment with the same geometry and
// group, and all members' descriptors agree except the id.
Status CheckAliasGroups(
    const StoredWeightManifestSpec& s,
    const std::unordered_map<std::string_view, size_t>& index) {
  using GeometryKey =
      std::tuple<std::vector<std::string>, Dims, Dims, uint64_t>;
  std::map<GeometryKey, std::vector<const StoredFragment*>> alias_groups;
  for (const auto& f : s.fragments) {
    if (f.aliases.empty()) continue;
    alias_groups[{f.aliases, f.global_offset, f.local_shape, f.nbytes}]
        .push_back(&f);
  }
  for (const auto& [geometry, members] : alias_groups) {
    const auto& group = std::get<0>(geometry);
    std::vector<std::string> present;
    for (const auto* f : members) present.push_back(f->tensor_id);
    std::sort(present.begin(), present.end());
    present.erase(std::unique(present.begin(), present.end()), present.end());
    if (present != group) {
      return Status::InvalidArgument(
          "stored alias group is incomplete for fragment geometry: " +
          members.front()->stored_fragment_id);
    }
    const TensorDescriptor& first = s.tensors[index.at(group.front())];
    for (const auto& member : group) {
      const TensorDescriptor& d = s.tensors[index.at(member)];
      if (d.global_shape() != first.global_shape() ||
          d.dtype() != first.dtype() || d.itemsize() != first.itemsize() ||
          d.layout_fingerprint() != first.layout_fingerprint()) {
        return Status::InvalidArgument(
            "stored alias tensor descriptors differ: " + group.front() +
            " and " + member);
      }
    }
  }
  return Status::OK();
}

// Object ranges: disjoint per object, except one range shared by the
// members of one alias group with the same geometry.
Status CheckObjectRanges(const StoredWeightManifestSpec& s) {
  std::vector<const StoredFragment*> ranges;
  for (const auto& f : s.fragments) ranges.push_back(&f);
  std::sort(ranges.begin(), ranges.end(), [](const auto* a, const auto* b) {
    return std::tie(a->object_key, a->object_offset, a->nbytes) <
           std::tie(b->object_key, b->object_offset, b->nbytes);
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const StoredFragment* p = ranges[i - 1];
    const StoredFragment* f = ranges[i];
    if (p->object_key != f->object_key) continue;
    const bool shared_alias = p->object_offset == f->object_offset &&
                              p->nbytes == f->nbytes && !f->aliases.empty() &&
                              p->aliases == f->aliases &&
                              p->global_offset == f->global_offset &&
                              p->local_shape == f->local_shape;
    if (!shared_alias && f->object_offset < p->object_offset + p->nbytes) {
      return Status::InvalidArgument(
          "stored fragment object ranges overlap: " + p->stored_fragment_id +
          " and " + f->stored_fragment_id + " in " + f->object_key);
    }
  }
  return Status::OK();
}

}  // namespace

Result<StoredWeightManifest> StoredWeightManifest::Make(
    StoredWeightManifestSpec s) {
  RESHARD_ASSIGN_OR_RETURN(const std::string payload_prefix, CheckKeyScheme(s));
  RESHARD_RETURN_NOT_OK(SortAndCheckTensors(&s));
  std::unordered_map<std::string_view, size_t> index;
  for (size_t t = 0; t < s.tensors.size(); ++t) {
    index.emplace(s.tensors[t].tensor_id(), t);
  }
  RESHARD_ASSIGN_OR_RETURN(FragmentsByTensor by_tensor,
                           CheckFragments(s, payload_prefix, index));
  RESHARD_RETURN_NOT_OK(CheckExactCover(s, &by_tensor));
  RESHARD_RETURN_NOT_OK(CheckAliasGroups(s, index));
  RESHARD_RETURN_NOT_OK(CheckObjectRanges(s));
  auto shared = std::make_shared<const StoredWeightManifestSpec>(std::move(s));
  StoredWeightManifest m(shared, "");
  m.digest_ = internal::Sha256Hex(StoredWeightManifestToJson(m));
  return m;
}

const TensorDescriptor* StoredWeightManifest::FindTensor(
    std::string_view id) const {
  return internal::FindSorted(
      s_->tensors, id,
      [](const auto& t) -> decltype(auto) { return t.tensor_id(); });
}

std::string StoredWeightManifestToJson(const StoredWeightManifest& m) {
  std::string out;
  internal::CanonicalJsonWriter w(&out, internal::JsonAscii::kRawUtf8);
  w.BeginObject();
  w.KeyString("created_at", m.created_at());
  w.Key("fragments");
  w.BeginArray();
  for (const auto& f : m.fragments()) {
    w.BeginObject();
    w.Key("aliases");
    w.BeginArray();
    for (const auto& a : f.aliases) w.String(a);
    w.EndArray();
    w.KeyString("fragment_id", f.stored_fragment_id);
    w.Key("global_offset");
    w.IntArray(f.global_offset);
    w.Key("local_shape");
    w.IntArray(f.local_shape);
    w.KeyUInt("nbytes", f.nbytes);
    w.KeyString("object_key", f.object_key);
    w.KeyUInt("object_offset", f.object_offset);
    w.KeyString("tensor_id", f.tensor_id);
    w.EndObject();
  }
  w.EndArray();
  w.KeyString("group_id", m.group_id());
  w.KeyString("manifest_key", m.manifest_key());
  w.KeyString("namespace", m.namespace_id());
  w.KeyString("resource_id", m.resource_id());
  w.KeyString("resource_kind", StoredWeightManifest::kResourceKind);
  w.KeyString("revision", m.revision());
  w.Key("tensors");
  w.BeginArray();
  for (const auto& t : m.tensors()) internal::WriteTensor(t, &w);
  w.EndArray();
  w.KeyUInt("weight_generation", m.weight_generation());
  w.EndObject();
  return out;
}

namespace {

Result<StoredFragment> ReadStoredFragment(internal::JsonElement e,
                                          const internal::JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(
      auto fo, internal::StrictObject::Make(
                   e, path, "stored fragment",
                   {"aliases", "fragment_id", "global_offset", "local_shape",
                    "nbytes", "object_key", "object_offset", "tensor_id"}));
  StoredFragment f;
  RESHARD_ASSIGN_OR_RETURN(f.stored_fragment_id, fo.Id("fragment_id"));
  RESHARD_ASSIGN_OR_RETURN(f.tensor_id, fo.Id("tensor_id"));
  RESHARD_ASSIGN_OR_RETURN(f.global_offset, fo.IntArray("global_offset"));
  RESHARD_ASSIGN_OR_RETURN(f.local_shape, fo.IntArray("local_shape"));
  RESHARD_ASSIGN_OR_RETURN(f.object_key, fo.Id("object_key"));
  RESHARD_ASSIGN_OR_RETURN(f.object_offset, fo.U64("object_offset"));
  RESHARD_ASSIGN_OR_RETURN(f.nbytes, fo.U64("nbytes"));
  RESHARD_ASSIGN_OR_RETURN(f.aliases, fo.StringArray("aliases"));
  return f;
}

}  // namespace

Result<StoredWeightManifest> StoredWeightManifestFromJson(
    std::string_view json) {
  using internal::JsonArray;
  using internal::JsonElement;
  using internal::JsonPath;
  RESHARD_ASSIGN_OR_RETURN(auto doc, internal::JsonDocument::Parse(json));
  const JsonPath root;
  RESHARD_ASSIGN_OR_RETURN(
      auto obj, internal::StrictObject::Make(
                    doc.root(), root, "stored manifest",
                    {"created_at", "fragments", "group_id", "manifest_key",
                     "namespace", "resource_id", "resource_kind", "revision",
                     "tensors", "weight_generation"}));
  RESHARD_ASSIGN_OR_RETURN(std::string_view kind, obj.String("resource_kind"));
  if (kind != StoredWeightManifest::kResourceKind) {
    return Status::InvalidArgument(
        "stored manifest resource_kind must be model_weight, got \"" +
        std::string(kind) + "\"");
  }
  StoredWeightManifestSpec s;
  RESHARD_ASSIGN_OR_RETURN(s.created_at, obj.Id("created_at"));
  RESHARD_ASSIGN_OR_RETURN(s.group_id, obj.Id("group_id"));
  RESHARD_ASSIGN_OR_RETURN(s.manifest_key, obj.Id("manifest_key"));
  RESHARD_ASSIGN_OR_RETURN(s.namespace_, obj.Id("namespace"));
  RESHARD_ASSIGN_OR_RETURN(s.resource_id, obj.Id("resource_id"));
  RESHARD_ASSIGN_OR_RETURN(s.revision, obj.Id("revision"));
  RESHARD_ASSIGN_OR_RETURN(s.weight_generation, obj.U64("weight_generation"));
  RESHARD_ASSIGN_OR_RETURN(JsonArray tensors, obj.Array("tensors"));
  RESHARD_RETURN_NOT_OK(
      tensors.ForEach([&](JsonElement e, const JsonPath& p) -> Status {
        RESHARD_ASSIGN_OR_RETURN(auto t, internal::ReadTensor(e, p));
        s.tensors.push_back(std::move(t));
        return Status::OK();
      }));
  RESHARD_ASSIGN_OR_RETURN(JsonArray frags, obj.Array("fragments"));
  RESHARD_RETURN_NOT_OK(
      frags.ForEach([&](JsonElement e, const JsonPath& p) -> Status {
        RESHARD_ASSIGN_OR_RETURN(auto f, ReadStoredFragment(e, p));
        s.fragments.push_back(std::move(f));
        return Status::OK();
      }));
  return StoredWeightManifest::Make(std::move(s));
}

bool LooksLikeStoredManifest(std::string_view json) {
  auto doc = internal::JsonDocument::Parse(json);
  if (!doc.ok()) return false;
  auto root = doc->root();
  return root.type() == simdjson::dom::element_type::OBJECT &&
         !root["manifest_key"].error();
}

}  // namespace reshard
