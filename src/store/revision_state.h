// A revision's shared state as the backend holds it, read and written by
// the upload, commit and maintenance halves of WeightStore: the decision
// record of an upload, the published manifest (strictly confined to its
// own revision), lease records, and the removal of an upload's keys.

#ifndef RESHARD_STORE_REVISION_STATE_H_
#define RESHARD_STORE_REVISION_STATE_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "reshard/sdk/object_store.h"
#include "reshard/weight_store.h"
#include "store/keys.h"
#include "store/records.h"

namespace reshard::internal {

inline StoreKeys KeysOf(const WeightStoreOptions& o) {
  return StoreKeys(o.key_prefix, o.namespace_);
}

// The revision a manifest belongs to: its group (the revision base).
inline RevisionKeys KeysOf(const StoredWeightManifest& m) {
  return RevisionKeys(m.group_id());
}

// The decision record of a transaction, if any (strict: any other shape is
// DataLoss naming the key).
Result<std::optional<UploadDecision>> ReadDecision(ObjectStore& b,
                                                   const std::string& key);

// Claims `decision` for the upload (create-only: the first decision wins)
// and returns the decision that won; FailedPrecondition when the other
// decision won.
Result<UploadDecision> ClaimDecision(ObjectStore& b, const std::string& key,
                                     UploadDecision decision,
                                     std::string_view plan_digest);

// Publishes `json` create-only under `key` and reads it back: a backend
// that acknowledged damaged bytes is reported, never trusted.
Status PublishManifest(ObjectStore& b, const std::string& key,
                       const std::string& json);

// Removes the keys of upload `txn` of the revision in the given key
// families ("payload", "checksums", "transactions") except those in `keep`,
// counting them in `report` when given.
Status RemoveTransactionKeys(ObjectStore& b, const RevisionKeys& keys,
                             const std::string& txn,
                             std::initializer_list<std::string_view> families,
                             const std::set<std::string>& keep,
                             GcReport* report);

// Payloads and checksum records; the families an abort or a lost commit
// removes.
inline const std::initializer_list<std::string_view> kPayloadFamilies = {
    "payload", "checksums"};

// Parses `text` as the manifest published at `manifest_key` and checks that
// it describes that revision only: its key, its group (the revision base)
// and every payload key. A manifest failing these is corrupt (DataLoss):
// loads, verify and gc never act on the keys it names.
Result<StoredWeightManifest> ParsePublishedManifest(
    std::string_view manifest_key, std::string_view text);

// The manifest published at `manifest_key` (NotFound when there is none),
// checked as ParsePublishedManifest does.
Result<StoredWeightManifest> ReadPublishedManifest(
    ObjectStore& b, std::string_view manifest_key);

// The expiry of the lease record at `key` (strict; errors name the key).
Result<int64_t> ReadLeaseExpiry(ObjectStore& b, const std::string& key);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_REVISION_STATE_H_
