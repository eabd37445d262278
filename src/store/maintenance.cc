// WeightStore maintenance: Verify re-reads a revision, Remove deletes one
// no load holds, Gc collects abandoned uploads (docs/store-format.md).

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "reshard/plan.h"
#include "reshard/weight_store.h"
#include "store/checksum.h"
#include "store/keys.h"
#include "store/progress.h"
#include "store/records.h"
#include "store/revision_files.h"
#include "store/revision_state.h"
#include "util/dims_text.h"

namespace reshard {

namespace {

using internal::KeysOf;
using internal::ParsePublishedManifest;
using internal::PublishManifest;
using internal::ReadDecision;
using internal::ReadLeaseExpiry;
using internal::ReadPublishedManifest;
using internal::RemoveTransactionKeys;
using internal::RevisionKeyKind;
using internal::RevisionKeys;
using internal::StoreKeys;
using internal::TransactionOfObject;
using internal::UploadDecision;

}  // namespace

Result<VerifyReport> WeightStore::Verify(std::string_view manifest_key) {
  RESHARD_ASSIGN_OR_RETURN(auto m, ReadManifest(manifest_key));
  const RevisionKeys keys = KeysOf(m);  // checked: the key's own
  VerifyReport report;
  uint64_t total = 0;
  for (const StoredFragment& s : m.fragments()) total += s.nbytes;
  internal::ProgressMeter progress(options_.progress, total);
  std::vector<uint8_t> buf(options_.staging_bytes);
  for (const StoredFragment& s : m.fragments()) {
    RESHARD_ASSIGN_OR_RETURN(auto sums,
                             internal::ReadChunkSums(*backend_, keys, s));
    RESHARD_ASSIGN_OR_RETURN(uint64_t size, backend_->ObjectSize(s.object_key));
    if (size < s.object_offset + s.nbytes) {
      return Status::DataLoss("payload " + s.object_key +
                              " is short: " + std::to_string(size) + " bytes");
    }
    const uint64_t step =
        options_.staging_bytes / sums.chunk_bytes * sums.chunk_bytes;
    for (uint64_t at = 0; at < size; at += step) {
      const uint64_t n = std::min(step, size - at);
      RESHARD_RETURN_NOT_OK(
          backend_->ReadRanges({{s.object_key, at, n, buf.data()}}));
      RESHARD_RETURN_NOT_OK(
          internal::VerifyChunks(sums, at, buf.data(), n, s.object_key,
                                 s.stored_fragment_id, &report.chunks));
    }
    ++report.objects;
    report.bytes += size;
    progress.Add(s.nbytes);
  }
  // The revision's files (store/revision_files.h), each against its
  // checksums and indexed size.
  RESHARD_RETURN_NOT_OK(internal::ForEachRevisionFile(
      *backend_, m,
      [&](const internal::RevisionFileEntry& f, std::string_view) {
        ++report.objects;
        report.bytes += f.size;
        return Status::OK();
      },
      &report.chunks));
  progress.Finish();
  return report;
}

namespace {

// How many unexpired leases the revision holds; a lease record that cannot
// be read is an error naming it (a load may hold it).
Result<uint32_t> CountLiveLeases(ObjectStore& b, const StoreKeys& layout,
                                 const RevisionKeys& keys, int64_t now) {
  // Listed without the trailing '/': a link planted at "leases" is no
  // lease (and is removed with the rest of the revision).
  RESHARD_ASSIGN_OR_RETURN(auto listed, b.List(keys.Leases()));
  uint32_t live = 0;
  for (const std::string& k : listed) {
    auto c = layout.Classify(k);
    if (!c || c->kind != RevisionKeyKind::kLease || c->base != keys.base()) {
      continue;
    }
    auto expires = ReadLeaseExpiry(b, k);
    if (expires.status().IsNotFound()) continue;  // released meanwhile
    RESHARD_RETURN_NOT_OK(expires.status());
    if (*expires > now) ++live;
  }
  return live;
}

}  // namespace

Status WeightStore::Remove(std::string_view manifest_key) {
  // The revision is the one the key names, whatever its manifest says.
  const StoreKeys layout = KeysOf(options_);
  auto c = layout.Classify(manifest_key);
  if (!c || c->kind != RevisionKeyKind::kManifest) {
    return Status::InvalidArgument(
        "not a weight revision manifest key (" + options_.key_prefix +
        "/<namespace>/<resource>/<revision>/<generation>/manifest): " +
        std::string(manifest_key));
  }
  const RevisionKeys keys(c->base);
  // A corrupt manifest (unparseable, a link, naming keys elsewhere) is
  // removable; only an absent one is an error.
  auto m = ReadManifest(manifest_key);
  if (m.status().IsNotFound()) return m.status();
  RESHARD_ASSIGN_OR_RETURN(
      uint32_t live,
      CountLiveLeases(*backend_, layout, keys, options_.now_seconds()));
  if (live > 0) {
    return Status::FailedPrecondition(
        "weight revision " + std::string(manifest_key) + " is leased by " +
        std::to_string(live) + " load(s); not removed");
  }
  // Withdraw the commit decisions first, so that a removal interrupted
  // below leaves undecided uploads (abandoned after gc_grace) rather than
  // decided ones that Gc would publish again from their pending manifest,
  // some of whose keys may already be gone. Then hide the revision and
  // remove everything under it (the backend lists no key through a
  // symbolic link and deletes a link itself only).
  RESHARD_ASSIGN_OR_RETURN(auto txn_keys,
                           backend_->List(keys.base() + "/transactions/"));
  for (const std::string& k : txn_keys) {
    auto record = layout.Classify(k);
    if (record && record->kind == RevisionKeyKind::kDecision) {
      RESHARD_RETURN_NOT_OK(backend_->Delete(k));
    }
  }
  RESHARD_RETURN_NOT_OK(backend_->Delete(manifest_key));
  RESHARD_ASSIGN_OR_RETURN(auto all, backend_->List(keys.base() + "/"));
  // Progress in keys removed of the revision's keys.
  internal::ProgressMeter meter(options_.progress, all.size());
  for (const std::string& k : all) {
    RESHARD_RETURN_NOT_OK(backend_->Delete(k));
    meter.Add(1);
  }
  meter.Finish();
  return Status::OK();
}

// ---------------------------------------------------------------- gc

namespace {

// One Gc pass: what the store holds, then each upload collected (or rolled
// forward) on its own, an error skipping that upload only.
class GarbageCollector {
 public:
  GarbageCollector(ObjectStore& b, const WeightStoreOptions& o,
                   GcReport* report)
      : b_(b), o_(o), layout_(KeysOf(o)), report_(report) {}

  // The uploads of every revision, and its manifest if published.
  Status Scan() {
    RESHARD_ASSIGN_OR_RETURN(auto keys, b_.List(layout_.ListPrefix()));
    for (const std::string& k : keys) {
      auto c = layout_.Classify(k);
      if (!c) continue;
      switch (c->kind) {
        case RevisionKeyKind::kManifest:
          manifests_[c->base] = k;
          break;
        case RevisionKeyKind::kLease:
        case RevisionKeyKind::kOther:
          break;
        default:  // payload, checksum and transaction keys
          txns_[c->base].insert(c->transaction);
      }
    }
    return Status::OK();
  }

  // What published manifests reference. A corrupt one may reference
  // anything under its revision: nothing there is collected until it is
  // repaired or removed.
  void ReadPublished() {
    for (const auto& [base, key] : manifests_) {
      auto m = ReadPublishedManifest(b_, key);
      if (!m.ok()) {
        corrupt_.insert(base);
        report_->skipped.push_back({key, m.status().message()});
        continue;
      }
      for (const auto& f : m->fragments()) {
        referenced_.insert(f.object_key);
        committed_txn_[base] = TransactionOfObject(f.object_key);
      }
    }
  }

  void CollectUploads() {
    const int64_t now = o_.now_seconds();
    // Progress in uploads examined of those found.
    uint64_t uploads = 0;
    for (const auto& [base, ids] : txns_) uploads += ids.size();
    internal::ProgressMeter meter(o_.progress, uploads);
    for (const auto& [base, ids] : txns_) {
      if (corrupt_.count(base)) {
        meter.Add(ids.size());
        continue;
      }
      auto committed = committed_txn_.find(base);
      for (const std::string& txn : ids) {
        if (txn.empty()) continue;
        if (committed != committed_txn_.end() && committed->second == txn) {
          continue;
        }
        Status st = CollectUpload(RevisionKeys(base), txn, now);
        if (!st.ok()) {
          report_->skipped.push_back({base + "/" + txn, st.message()});
        }
      }
      meter.Add(ids.size());
    }
    meter.Finish();
  }

 private:
  // Aborted, lost to another manifest, or undecided past the grace period:
  // removed (never a key a published manifest references). Decided to
  // commit but unpublished: rolled forward.
  Status CollectUpload(const RevisionKeys& keys, const std::string& txn,
                       int64_t now) {
    RESHARD_ASSIGN_OR_RETURN(auto decided,
                             ReadDecision(b_, keys.Decision(txn)));
    if (decided == UploadDecision::kCommit && !manifests_.count(keys.base())) {
      return RollForward(keys, txn);
    }
    if (!decided) {
      RESHARD_ASSIGN_OR_RETURN(int64_t started, StartedAt(keys, txn));
      if (now - started < o_.gc_grace.count()) return Status::OK();
    }
    RESHARD_RETURN_NOT_OK(RemoveTransactionKeys(
        b_, keys, txn, {"payload", "checksums", "transactions"}, referenced_,
        report_));
    report_->transactions_removed.push_back(keys.base() + "/" + txn);
    return Status::OK();
  }

  // When the undecided upload started; an upload without a started record
  // is as old as can be.
  Result<int64_t> StartedAt(const RevisionKeys& keys, const std::string& txn) {
    const std::string key = keys.Started(txn);
    auto text = b_.Get(key);
    if (text.status().IsNotFound()) return int64_t{0};
    RESHARD_RETURN_NOT_OK(text.status());
    return internal::ParseStartedRecord(*text, key);
  }

  // Decided but not published (the writer died after its decision): roll
  // forward, never delete. A concurrent Commit of the same transaction
  // publishes the same bytes. Only a manifest of this very revision is
  // published.
  Status RollForward(const RevisionKeys& keys, const std::string& txn) {
    const std::string pending = keys.PendingManifest(txn);
    auto copy = b_.Get(pending);
    if (copy.status().IsNotFound()) return Status::OK();
    RESHARD_RETURN_NOT_OK(copy.status());
    if (!ParsePublishedManifest(keys.Manifest(), *copy).ok()) {
      return Status::DataLoss("damaged pending weight manifest: " + pending);
    }
    Status st = PublishManifest(b_, keys.Manifest(), *copy);
    if (st.ok()) {
      report_->transactions_completed.push_back(keys.base() + "/" + txn);
    } else if (!st.IsAlreadyExists()) {
      return st.WithContext("publishing " + pending);
    }
    return Status::OK();
  }

  ObjectStore& b_;
  const WeightStoreOptions& o_;
  const StoreKeys layout_;
  GcReport* report_;
  std::map<std::string, std::set<std::string>> txns_;  // base -> txn ids
  std::map<std::string, std::string> manifests_;       // base -> key
  std::set<std::string> referenced_;                   // object keys
  std::map<std::string, std::string> committed_txn_;   // base -> txn
  std::set<std::string> corrupt_;                      // bases
};

}  // namespace

Result<GcReport> WeightStore::Gc() {
  GcReport report;
  GarbageCollector gc(*backend_, options_, &report);
  RESHARD_RETURN_NOT_OK(gc.Scan());
  gc.ReadPublished();
  gc.CollectUploads();
  RESHARD_ASSIGN_OR_RETURN(report.temporaries_removed,
                           backend_->RemoveStaleTemporaries(options_.gc_grace));
  return report;
}

}  // namespace reshard
