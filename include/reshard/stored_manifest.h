// A committed store revision's manifest (docs/store-format.md): the stored
// fragments of one complete replica, each a byte range of an object, usable as
// a plan source in place of a live placement.

#ifndef RESHARD_STORED_MANIFEST_H_
#define RESHARD_STORED_MANIFEST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard {

struct StoredFragment {
  // The stored fragment id (wire field "fragment_id"): see
  // docs/store-format.md.
  std::string stored_fragment_id;
  std::string tensor_id;
  Dims global_offset;
  Dims local_shape;
  std::string object_key;
  uint64_t object_offset = 0;
  uint64_t nbytes = 0;
  std::vector<std::string> aliases;  // sorted
  friend bool operator==(const StoredFragment&,
                         const StoredFragment&) = default;
};

struct StoredWeightManifestSpec {
  std::string namespace_;
  std::string resource_id;
  std::string revision;
  uint64_t weight_generation = 0;
  std::string group_id;
  std::string manifest_key;  // "<group>/manifest"
  std::string created_at;    // UTC ISO-8601, e.g. 2026-07-23T00:00:00Z
  std::vector<TensorDescriptor> tensors;
  std::vector<StoredFragment> fragments;
};

class StoredWeightManifest {
 public:
  // Validates rule 63: key layout, fragment geometry, unique ids and
  // geometry, complete alias groups, exact cover per tensor, disjoint object
  // ranges (except alias members sharing one range).
  static Result<StoredWeightManifest> Make(StoredWeightManifestSpec spec);

  static constexpr std::string_view kResourceKind = "model_weight";

  // The store namespace the revision was uploaded under.
  const std::string& namespace_id() const { return s_->namespace_; }
  const std::string& resource_id() const { return s_->resource_id; }
  const std::string& revision() const { return s_->revision; }
  uint64_t weight_generation() const { return s_->weight_generation; }
  // The revision's key prefix ("<namespace>/<resource>/<revision>/..."):
  // every key of the revision lives below it.
  const std::string& group_id() const { return s_->group_id; }
  // "<group_id>/manifest".
  const std::string& manifest_key() const { return s_->manifest_key; }
  // UTC ISO-8601 creation time, e.g. 2026-07-23T00:00:00Z.
  const std::string& created_at() const { return s_->created_at; }
  // Sorted by tensor_id.
  const std::vector<TensorDescriptor>& tensors() const { return s_->tensors; }
  // Sorted by stored_fragment_id.
  const std::vector<StoredFragment>& fragments() const { return s_->fragments; }
  const TensorDescriptor* FindTensor(std::string_view tensor_id) const;
  // Hex SHA-256 of the canonical JSON (ensure_ascii=False).
  const std::string& manifest_digest() const { return digest_; }

 private:
  StoredWeightManifest(std::shared_ptr<const StoredWeightManifestSpec> s,
                       std::string digest)
      : s_(std::move(s)), digest_(std::move(digest)) {}
  std::shared_ptr<const StoredWeightManifestSpec> s_;
  std::string digest_;
};

// Calls visit(name, value) for each field of `m`'s summary, names sorted:
// what `reshard store show --json` prints of a revision and Python's
// manifest.summary() returns (an upload's receipt: upload() returns the
// committed manifest). "bytes" sums the fragments' bytes.
template <typename Visit>
void VisitFields(const StoredWeightManifest& m, Visit&& visit) {
  uint64_t bytes = 0;
  for (const auto& f : m.fragments()) bytes += f.nbytes;
  visit("bytes", bytes);
  visit("created_at", m.created_at());
  visit("fragments", static_cast<uint64_t>(m.fragments().size()));
  visit("manifest_digest", m.manifest_digest());
  visit("manifest_key", m.manifest_key());
  visit("namespace", m.namespace_id());
  visit("resource_id", m.resource_id());
  visit("revision", m.revision());
  visit("tensors", static_cast<uint64_t>(m.tensors().size()));
  visit("weight_generation", m.weight_generation());
}

// Canonical JSON, ensure_ascii=False (raw UTF-8), sorted keys, compact.
std::string StoredWeightManifestToJson(const StoredWeightManifest& manifest);
Result<StoredWeightManifest> StoredWeightManifestFromJson(
    std::string_view json);

// True if `json` is an object with a top-level "manifest_key" (a stored
// manifest rather than a placement); false for anything else.
bool LooksLikeStoredManifest(std::string_view json);

}  // namespace reshard

#endif  // RESHARD_STORED_MANIFEST_H_
