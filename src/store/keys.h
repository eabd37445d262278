// The key scheme of the weight store (docs/store-format.md, "Keys"): the one
// place that builds the key of every record and object of a revision, and
// the one place that takes a listed key apart again (Classify), for List,
// Gc and Remove alike.
//
//   <prefix>/<q(namespace)>/<q(resource)>/<q(revision)>/<generation>/
//     manifest
//     payload/<txn>/<fragment_id>
//     checksums/<txn>/<fragment_id>
//     transactions/<txn>/{started,decision,pending-manifest,plan}
//     transactions/<txn>/receipts/<name>
//     leases/<lease_id>

#ifndef RESHARD_STORE_KEYS_H_
#define RESHARD_STORE_KEYS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "reshard/placement.h"
#include "reshard/sdk/object_store.h"
#include "reshard/stored_manifest.h"
#include "store/checksum.h"

namespace reshard::internal {

// Python urllib.parse.quote(s, safe="") for ids inside keys; additionally a
// leading '.' is escaped (%2E), since key components cannot start with '.'.
std::string QuoteKeyComponent(std::string_view id);

// Stored fragment id: the first 24 hex digits of SHA-256 of
// "<tensor_id>|<offset>|<shape>" with Python tuple rendering ("(0, 4)",
// "(8,)"), as the reference computes it.
std::string StoredFragmentId(std::string_view tensor_id, const Dims& offset,
                             const Dims& shape);

// The key families below a revision base. A key of a family need not have
// its exact shape (a link planted at "payload/<txn>" or at
// "transactions/<txn>" is listed as a key too): it still carries its
// transaction, so that Gc removes it with the upload.
enum class RevisionKeyKind {
  kManifest,          // manifest
  kPayload,           // payload/<txn>[/<fragment_id>]
  kChecksum,          // checksums/<txn>[/<fragment_id>]
  kStarted,           // transactions/<txn>/started
  kDecision,          // transactions/<txn>/decision
  kPendingManifest,   // transactions/<txn>/pending-manifest
  kPlan,              // transactions/<txn>/plan
  kReceipt,           // transactions/<txn>/receipts/<name>
  kTransactionOther,  // anything else under transactions/<txn>
  kLease,             // leases/<lease_id>
  kOther,             // anything else below the base
};

// A key below a revision base, taken apart.
struct ClassifiedKey {
  RevisionKeyKind kind = RevisionKeyKind::kOther;
  std::string base;         // "<prefix>/<ns>/<resource>/<revision>/<gen>"
  std::string transaction;  // payload, checksum and transaction keys
  std::string name;         // fragment id, receipt name or lease id
};

// The keys of one revision, below its base.
class RevisionKeys {
 public:
  explicit RevisionKeys(std::string base) : base_(std::move(base)) {}
  // The revision of "<base>/manifest"; nullopt for any other key.
  static std::optional<RevisionKeys> OfManifestKey(std::string_view key);

  const std::string& base() const { return base_; }
  std::string Manifest() const { return base_ + "/manifest"; }
  std::string Payload(std::string_view txn, std::string_view fid) const;
  std::string Checksum(std::string_view txn, std::string_view fid) const;
  // "<base>/<family>/<txn>": every key of one upload in one family
  // ("payload", "checksums" or "transactions") is this or below it.
  std::string TransactionFamily(std::string_view family,
                                std::string_view txn) const;
  std::string Transaction(std::string_view txn) const {
    return TransactionFamily("transactions", txn);
  }
  std::string Started(std::string_view txn) const;
  std::string Decision(std::string_view txn) const;
  std::string PendingManifest(std::string_view txn) const;
  std::string Plan(std::string_view txn) const;
  // The prefix every receipt record of the upload starts with.
  std::string ReceiptsPrefix(std::string_view txn) const;
  std::string Receipt(std::string_view txn, std::string_view name) const;
  // "<base>/leases" (no trailing '/': listing it also finds a link planted
  // at the directory's name).
  std::string Leases() const { return base_ + "/leases"; }
  std::string Lease(std::string_view lease_id) const;

 private:
  std::string base_;
};

// The key scheme below a key prefix and namespace.
class StoreKeys {
 public:
  StoreKeys(std::string prefix, std::string namespace_id)
      : prefix_(std::move(prefix)), namespace_(std::move(namespace_id)) {}

  const std::string& prefix() const { return prefix_; }
  // The base key of a revision.
  std::string Base(std::string_view resource_id, std::string_view revision,
                   uint64_t weight_generation) const;
  RevisionKeys Revision(std::string_view resource_id, std::string_view revision,
                        uint64_t weight_generation) const {
    return RevisionKeys(Base(resource_id, revision, weight_generation));
  }
  // What a listing of every revision lists ("<prefix>/").
  std::string ListPrefix() const { return prefix_ + "/"; }
  // `key` taken apart; nullopt when it is not below a revision base of
  // this prefix (any namespace).
  std::optional<ClassifiedKey> Classify(std::string_view key) const;

 private:
  std::string prefix_;
  std::string namespace_;
};

// "<base>/payload/<txn>/<fid>" -> txn ("" if not a payload key).
std::string TransactionOfObject(std::string_view object_key);

// The parsed checksum record of a stored fragment of the revision at
// `keys`; errors name the fragment.
Result<ChunkSums> ReadChunkSums(ObjectStore& backend, const RevisionKeys& keys,
                                const StoredFragment& fragment);

// Unix seconds of the system clock.
int64_t UnixSeconds();

// `bytes` random bytes as hex; the generator is reseeded in every process,
// so forked writers never share ids.
std::string RandomHex(size_t bytes);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_KEYS_H_
