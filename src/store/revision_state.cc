// A revision's shared state through the backend: decision records,
// published manifests, lease records and a transaction's keys.

#include "store/revision_state.h"

#include <ctime>

namespace reshard::internal {

// The decision record of a transaction, if any (strict: any other shape is
// DataLoss naming the key).
Result<std::optional<UploadDecision>> ReadDecision(ObjectStore& b,
                                                   const std::string& key) {
  auto text = b.Get(key);
  if (text.status().IsNotFound()) return std::optional<UploadDecision>();
  RESHARD_RETURN_NOT_OK(text.status());
  RESHARD_ASSIGN_OR_RETURN(UploadDecision d,
                           internal::ParseDecisionRecord(*text, key));
  return std::optional<UploadDecision>(d);
}

// Claims `decision` for the upload (create-only: the first decision wins)
// and returns the decision that won.
Result<UploadDecision> ClaimDecision(ObjectStore& b, const std::string& key,
                                     UploadDecision decision,
                                     std::string_view plan_digest) {
  Status st = b.Put(key, internal::DecisionRecord(decision, plan_digest));
  if (!st.ok() && !st.IsAlreadyExists()) return st;
  RESHARD_ASSIGN_OR_RETURN(auto decided, ReadDecision(b, key));
  if (!decided) {
    return Status::Unavailable("upload decision is not complete; retry");
  }
  if (*decided != decision) {
    return Status::FailedPrecondition(
        "weight upload already chose " +
        std::string(internal::UploadDecisionName(*decided)));
  }
  return *decided;
}

// Publishes `json` create-only under `key` and reads it back: a backend
// that acknowledged damaged bytes is reported, never trusted.
Status PublishManifest(ObjectStore& b, const std::string& key,
                       const std::string& json) {
  RESHARD_RETURN_NOT_OK(b.Put(key, json));
  RESHARD_ASSIGN_OR_RETURN(std::string stored, b.Get(key));
  if (stored != json) {
    return Status::DataLoss("published weight manifest is damaged: " + key);
  }
  return Status::OK();
}

// Removes the keys of upload `txn` of the revision in the given key
// families ("payload", "checksums", "transactions") except those in `keep`,
// counting them in `report` when given.
Status RemoveTransactionKeys(ObjectStore& b, const RevisionKeys& keys,
                             const std::string& txn,
                             std::initializer_list<std::string_view> families,
                             const std::set<std::string>& keep,
                             GcReport* report) {
  for (std::string_view family : families) {
    // Listed without the trailing '/', so that a non-directory entry at
    // "<family>/<txn>" (a planted symbolic link) is removed too: Delete
    // removes a link itself, never what it points to.
    const std::string dir = keys.TransactionFamily(family, txn);
    RESHARD_ASSIGN_OR_RETURN(auto listed, b.List(dir));
    for (const std::string& k : listed) {
      if (k != dir && !k.starts_with(dir + "/")) continue;
      if (keep.count(k)) continue;
      if (report != nullptr) {
        auto size = b.ObjectSize(k);
        if (size.ok()) report->bytes_removed += *size;
        ++report->keys_removed;
      }
      RESHARD_RETURN_NOT_OK(b.Delete(k));
    }
  }
  return Status::OK();
}

namespace {

// The revision a manifest describes is the one its key names (a damaged
// identity would send loads and checksum reads elsewhere), and every
// payload key is <base>/payload/<txn>/<name>.
Status CheckManifestConfinement(std::string_view manifest_key,
                                const StoredWeightManifest& m) {
  const std::string identity =
      "/" + internal::QuoteKeyComponent(m.namespace_id()) + "/" +
      internal::QuoteKeyComponent(m.resource_id()) + "/" +
      internal::QuoteKeyComponent(m.revision()) + "/" +
      std::to_string(m.weight_generation()) + "/manifest";
  if (!m.manifest_key().ends_with(identity)) {
    return Status::DataLoss("corrupt manifest " + std::string(manifest_key) +
                            ": it describes " + m.resource_id() + "@" +
                            m.revision() + "/" +
                            std::to_string(m.weight_generation()));
  }
  const std::string payload = m.group_id() + "/payload/";
  for (const StoredFragment& f : m.fragments()) {
    const std::string_view key(f.object_key);
    const std::string_view rest =
        key.starts_with(payload) ? key.substr(payload.size()) : "";
    const size_t slash = rest.find('/');
    if (slash == 0 || slash == std::string_view::npos ||
        slash + 1 == rest.size() ||
        rest.find('/', slash + 1) != std::string_view::npos) {
      return Status::DataLoss("corrupt manifest " + std::string(manifest_key) +
                              ": stored fragment " + f.stored_fragment_id +
                              " names object " + f.object_key + ", not " +
                              payload + "<txn>/<id>");
    }
  }
  return Status::OK();
}

}  // namespace

// Parses `text` as the manifest published at `manifest_key` and checks that
// it describes that revision only: its key, its group (the revision base)
// and every payload key. A manifest failing these is corrupt (DataLoss):
// loads, verify and gc never act on the keys it names.
Result<StoredWeightManifest> ParsePublishedManifest(
    std::string_view manifest_key, std::string_view text) {
  auto parsed = StoredWeightManifestFromJson(text);
  if (!parsed.ok()) {
    return Status::DataLoss("corrupt manifest " + std::string(manifest_key) +
                            ": " + parsed.status().message());
  }
  StoredWeightManifest m = std::move(parsed).ValueOrDie();
  if (m.manifest_key() != manifest_key) {
    return Status::DataLoss(
        "manifest key mismatch: " + std::string(manifest_key) + " holds " +
        m.manifest_key());
  }
  // (The decoder already requires manifest_key == group_id + "/manifest".)
  RESHARD_RETURN_NOT_OK(CheckManifestConfinement(manifest_key, m));
  return m;
}

Result<StoredWeightManifest> ReadPublishedManifest(
    ObjectStore& b, std::string_view manifest_key) {
  auto text = b.Get(manifest_key);
  if (text.status().IsNotFound()) {
    return Status::NotFound("no published weight revision " +
                            std::string(manifest_key));
  }
  RESHARD_RETURN_NOT_OK(text.status());
  return ParsePublishedManifest(manifest_key, *text);
}

// The expiry of the lease record at `key` (strict; errors name the key).
Result<int64_t> ReadLeaseExpiry(ObjectStore& b, const std::string& key) {
  RESHARD_ASSIGN_OR_RETURN(std::string text, b.Get(key));
  return internal::ParseLeaseRecord(text, key);
}

}  // namespace reshard::internal
