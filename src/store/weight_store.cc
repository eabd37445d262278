// WeightStore: opening a store, its options, and the read side (manifests,
// listings). Uploads, commits and maintenance live beside it
// (docs/store-format.md).

#include "reshard/weight_store.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "reshard/plan.h"
#include "store/checksum.h"
#include "store/keys.h"
#include "store/progress.h"
#include "store/records.h"
#include "store/revision_files.h"
#include "store/revision_state.h"
#include "util/dims_text.h"

namespace reshard {

namespace {

using internal::ClassifiedKey;
using internal::KeysOf;
using internal::ReadLeaseExpiry;
using internal::ReadPublishedManifest;
using internal::RevisionKeyKind;
using internal::RevisionKeys;
using internal::StoreKeys;

}  // namespace

uint64_t UploadPlan::BytesOf(std::string_view participant_id) const {
  uint64_t n = 0;
  for (const auto& op : ops_) {
    if (op.participant_id == participant_id) {
      n += manifest_->fragments()[op.stored_fragment].nbytes;
    }
  }
  return n;
}

Result<WeightStore> WeightStore::Open(std::string_view uri,
                                      WeightStoreOptions options) {
  RESHARD_ASSIGN_OR_RETURN(auto backend, OpenObjectStore(uri));
  return Open(std::shared_ptr<ObjectStore>(std::move(backend)),
              std::move(options));
}

namespace {

// The clock and id sources options leave empty.
void FillDefaultHooks(WeightStoreOptions* options) {
  if (!options->now_seconds) options->now_seconds = internal::UnixSeconds;
  if (!options->new_transaction_id) {
    options->new_transaction_id = [] { return internal::RandomHex(16); };
  }
  if (!options->new_lease_id) {
    options->new_lease_id = [] { return internal::RandomHex(8); };
  }
}

}  // namespace

Result<WeightStore> WeightStore::Open(std::shared_ptr<ObjectStore> backend,
                                      WeightStoreOptions options) {
  if (options.chunk_bytes == 0 || options.max_range_bytes == 0 ||
      options.max_ranges_per_request == 0) {
    return Status::InvalidArgument(
        "chunk_bytes, max_range_bytes and max_ranges_per_request must be "
        "positive");
  }
  if (options.staging_bytes < options.chunk_bytes) {
    return Status::InvalidArgument("staging_bytes (" +
                                   std::to_string(options.staging_bytes) +
                                   ") must hold at least one chunk (" +
                                   std::to_string(options.chunk_bytes) + ")");
  }
  while (options.key_prefix.ends_with('/')) options.key_prefix.pop_back();
  while (options.key_prefix.starts_with('/')) options.key_prefix.erase(0, 1);
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(options.key_prefix));
  FillDefaultHooks(&options);
  return WeightStore(std::move(backend), std::move(options));
}

WeightStore WeightStore::WithOptions(WeightStoreOptions options) const {
  FillDefaultHooks(&options);
  return WeightStore(backend_, std::move(options));
}

// ---------------------------------------------------------------- read side

Result<StoredWeightManifest> WeightStore::ReadManifest(
    std::string_view manifest_key) {
  return ReadPublishedManifest(*backend_, manifest_key);
}

namespace {

// A listed revision from its manifest: READY, or CORRUPT with the error
// (one tampered revision must not hide the others).
RevisionInfo DescribeRevision(ObjectStore& b, const std::string& key) {
  RevisionInfo r;
  r.manifest_key = key;
  auto m = ReadPublishedManifest(b, key);
  if (!m.ok()) {
    r.state = "CORRUPT";
    r.error = m.status().message();
    return r;
  }
  r.resource_id = m->resource_id();
  r.revision = m->revision();
  r.weight_generation = m->weight_generation();
  r.state = "READY";
  r.fragments = m->fragments().size();
  for (const auto& f : m->fragments()) r.bytes += f.nbytes;
  return r;
}

}  // namespace

Result<std::vector<std::string>> WeightStore::ManifestKeys(
    std::string_view resource_id) {
  const StoreKeys layout = KeysOf(options_);
  // "<prefix>/<ns>/<resource>/": the base without revision and generation.
  std::string prefix = layout.Base(resource_id, "", 0);
  prefix.resize(prefix.size() - 2);  // the empty revision and "/0"
  RESHARD_ASSIGN_OR_RETURN(auto keys, backend_->List(prefix));
  std::vector<std::string> out;
  for (std::string& k : keys) {
    auto c = layout.Classify(k);
    if (c && c->kind == RevisionKeyKind::kManifest) out.push_back(std::move(k));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<RevisionInfo>> WeightStore::List() {
  const StoreKeys layout = KeysOf(options_);
  RESHARD_ASSIGN_OR_RETURN(auto keys, backend_->List(layout.ListPrefix()));
  std::vector<std::pair<const std::string*, ClassifiedKey>> classified;
  for (const std::string& k : keys) {
    if (auto c = layout.Classify(k)) classified.emplace_back(&k, *c);
  }
  std::map<std::string, RevisionInfo> revisions;  // by base
  for (const auto& [key, c] : classified) {
    if (c.kind == RevisionKeyKind::kManifest) {
      revisions[c.base] = DescribeRevision(*backend_, *key);
    }
  }
  const int64_t now = options_.now_seconds();
  for (const auto& [key, c] : classified) {
    if (c.kind == RevisionKeyKind::kLease) {
      auto it = revisions.find(c.base);
      if (it == revisions.end() || it->second.state != "READY") continue;
      // A lease that cannot be read counts as held (Remove refuses the
      // revision, naming the record).
      auto expires = ReadLeaseExpiry(*backend_, *key);
      if (expires.status().IsNotFound()) continue;  // released meanwhile
      if (!expires.ok() || *expires > now) ++it->second.leases;
    }
    if (c.kind == RevisionKeyKind::kStarted && !revisions.count(c.base)) {
      RevisionInfo& r = revisions[c.base];
      r.manifest_key = RevisionKeys(c.base).Manifest();
      r.state = "IMPORTING";
    }
  }
  std::vector<RevisionInfo> out;
  for (auto& [b, r] : revisions) out.push_back(std::move(r));
  return out;
}

}  // namespace reshard
