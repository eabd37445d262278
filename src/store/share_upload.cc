// WeightStore::UploadShare: the multi-process upload protocol with the
// processes meeting in the store (docs/store-format.md, "Uploads from
// several processes").
//
// Records, under transactions/<txn>/ of the revision (collected with the
// upload by Gc, like every transaction record):
//   shares/<rank>   {"bindings":[<binding JSON>...],"rank":r,
//                    "record_type":"weight-upload-share"}
//   failed/<rank>   why that rank gave up (text)
// plus the protocol's own plan, receipts, decision and manifest.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "reshard/weight_store.h"
#include "store/device_staging.h"
#include "store/keys.h"
#include "store/records.h"
#include "util/canonical_json.h"
#include "util/json_reader.h"
#include "util/sha256.h"

namespace reshard {
namespace {

using Clock = std::chrono::steady_clock;
using internal::RevisionKeys;

std::string ShareRecord(
    int rank, const std::vector<WeightRuntimeBindingManifest>& bindings) {
  std::string out;
  internal::CanonicalJsonWriter w(&out, internal::JsonAscii::kRawUtf8);
  w.BeginObject();
  w.Key("bindings");
  w.BeginArray();
  for (const auto& b : bindings) w.String(WeightRuntimeBindingToJson(b));
  w.EndArray();
  w.KeyInt("rank", rank);
  w.KeyString("record_type", "weight-upload-share");
  w.EndObject();
  return out;
}

Result<std::vector<WeightRuntimeBindingManifest>> ParseShareRecord(
    std::string_view text, const std::string& key) {
  auto fail = [&](const Status& st) {
    return Status::DataLoss("malformed upload share record: " + key + ": " +
                            st.message());
  };
  auto doc = internal::JsonDocument::Parse(text);
  if (!doc.ok()) return fail(doc.status());
  const internal::JsonPath root;
  auto obj = internal::StrictObject::Make(doc->root(), root, "upload share",
                                          {"bindings", "rank", "record_type"});
  if (!obj.ok()) return fail(obj.status());
  auto texts = obj->StringArray("bindings");
  if (!texts.ok()) return fail(texts.status());
  std::vector<WeightRuntimeBindingManifest> out;
  for (const std::string& t : *texts) {
    auto b = WeightRuntimeBindingFromJson(t);
    if (!b.ok()) return fail(b.status());
    out.push_back(std::move(*b));
  }
  return out;
}

// "1, 3": the ranks in [0, ranks) for which `have` is false.
template <typename Have>
std::string RanksWithout(int ranks, Have&& have) {
  std::string out;
  for (int r = 0; r < ranks; ++r) {
    if (!have(r)) out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

}  // namespace

namespace internal {

// One rank's part of a shared upload: its records and waits.
class ShareUpload {
 public:
  ShareUpload(ObjectStore& backend, const ShareUploadOptions& options,
              RevisionKeys keys, std::string txn)
      : b_(backend),
        o_(options),
        keys_(std::move(keys)),
        txn_(std::move(txn)),
        deadline_(Clock::now() + options.timeout) {}

  std::string Key(std::string_view family, int rank) const {
    return keys_.Transaction(txn_) + "/" + std::string(family) + "/" +
           std::to_string(rank);
  }

  const ShareUploadOptions& options() const { return o_; }
  const RevisionKeys& keys() const { return keys_; }
  const std::string& txn() const { return txn_; }
  // Rank 0: every rank's bindings, checked once while planning.
  std::optional<CheckedBindings>& all() { return all_; }
  // This rank's bindings when the caller checked them.
  std::optional<CheckedBindings>& own() { return own_; }

  std::string Where() const {
    return "upload " + o_.upload_id + " (transaction " + txn_ + ")";
  }

  // Records why this rank gives up, for the others, and returns `st`.
  Status Fail(const Status& st) {
    (void)b_.Put(Key("failed", o_.rank), st.ToString());
    return st;
  }

  // The first failure another rank recorded, as an Aborted status; OK if
  // none.
  Status OthersFailed() {
    for (int r = 0; r < o_.ranks; ++r) {
      if (r == o_.rank) continue;
      auto why = b_.Get(Key("failed", r));
      if (why.ok()) {
        return Status::Aborted(Where() + ": rank " + std::to_string(r) +
                               " failed: " + *why);
      }
    }
    return Status::OK();
  }

  // Polls `ready` (true: done; an error: stop) until the deadline; a
  // failure recorded by another rank stops the wait. `waiting_for`
  // describes what is awaited, for the timeout message.
  template <typename Ready, typename What>
  Status Wait(Ready&& ready, What&& waiting_for) {
    while (true) {
      RESHARD_ASSIGN_OR_RETURN(bool done, ready());
      if (done) return Status::OK();
      RESHARD_RETURN_NOT_OK(OthersFailed());
      if (Clock::now() >= deadline_) {
        return Status::Unavailable(Where() + ": timed out after " +
                                   std::to_string(o_.timeout.count()) +
                                   " ms waiting for " + waiting_for());
      }
      std::this_thread::sleep_for(o_.poll_interval);
    }
  }

  ObjectStore& b_;
  const ShareUploadOptions& o_;
  RevisionKeys keys_;
  std::string txn_;
  std::optional<CheckedBindings> all_;
  std::optional<CheckedBindings> own_;
  Clock::time_point deadline_;
};

}  // namespace internal

// Rank 0 gathers every rank's bindings, prepares the upload and publishes
// its plan; the other ranks wait for that plan.
Result<UploadPlan> WeightStore::ShareUploadPlan(
    const WeightPlacementManifest& source, internal::ShareUpload& u) {
  const ShareUploadOptions& options = u.options();
  const std::string& txn = u.txn();
  const RevisionKeys& keys = u.keys();
  UploadPlan plan;
  if (options.rank == 0) {
    std::vector<bool> have(options.ranks, false);
    RESHARD_RETURN_NOT_OK(u.Wait(
        [&]() -> Result<bool> {
          for (int r = 0; r < options.ranks; ++r) {
            have[r] = have[r] || backend_->Get(u.Key("shares", r)).ok();
          }
          return std::find(have.begin(), have.end(), false) == have.end();
        },
        [&] {
          return "the bindings of rank(s) " +
                 RanksWithout(options.ranks, [&](int r) { return have[r]; });
        }));
    std::vector<WeightRuntimeBindingManifest> all;
    for (int r = 0; r < options.ranks; ++r) {
      const std::string key = u.Key("shares", r);
      RESHARD_ASSIGN_OR_RETURN(std::string text, backend_->Get(key));
      auto share = ParseShareRecord(text, key);
      if (!share.ok()) return u.Fail(share.status());
      all.insert(all.end(), share->begin(), share->end());
    }
    // This rank's own bindings are not checked again when the caller
    // checked them.
    auto checked = u.own() ? u.own()->Replace(source, all)
                           : CheckedBindings::Make(source, std::move(all),
                                                   BindingCoverage::kSubset);
    if (!checked.ok()) {
      return u.Fail(checked.status().WithContext("source bindings"));
    }
    u.all() = *checked;
    auto prepared = PrepareUploadAs(source, *checked, txn);
    if (!prepared.ok()) return u.Fail(prepared.status());
    plan = std::move(*prepared);
    if (Status p = PublishUploadPlan(plan); !p.ok()) return u.Fail(p);
  } else {
    const std::string manifest_key = keys.Manifest();
    RESHARD_RETURN_NOT_OK(u.Wait(
        [&]() -> Result<bool> {
          auto read = ReadUploadPlan(manifest_key, txn);
          if (read.ok()) {
            plan = std::move(*read);
            return true;
          }
          if (read.status().IsNotFound()) return false;
          return read.status();
        },
        [] { return std::string("the upload plan of rank 0"); }));
  }

  return plan;
}

// Rank 0 gathers the receipts and commits (aborting the upload on
// failure); the other ranks return once the revision is published.
Result<StoredWeightManifest> WeightStore::CommitShareUpload(
    const UploadPlan& plan, internal::ShareUpload& u) {
  const ShareUploadOptions& options = u.options();
  const std::string& txn = u.txn();
  const RevisionKeys& keys = u.keys();
  const std::string& manifest_key = plan.manifest().manifest_key();
  if (options.rank == 0) {
    std::vector<UploadReceipt> receipts;
    std::string missing;
    Status waited = u.Wait(
        [&]() -> Result<bool> {
          auto gathered = GatherReceipts(plan);
          if (gathered.ok()) {
            receipts = std::move(*gathered);
            return true;
          }
          if (!gathered.status().IsFailedPrecondition()) {
            return gathered.status();
          }
          missing = gathered.status().message();
          return false;
        },
        [&] { return "the receipts of every writer (" + missing + ")"; });
    if (waited.ok()) waited = Commit(plan, receipts);
    if (!waited.ok()) {
      (void)Abort(plan);
      return u.Fail(waited);
    }
    return plan.manifest();
  }
  // Other ranks return once the revision is published (or fail with the
  // upload).
  RESHARD_RETURN_NOT_OK(u.Wait(
      [&]() -> Result<bool> {
        if (backend_->Get(manifest_key).ok()) return true;
        auto decision = backend_->Get(keys.Decision(txn));
        if (decision.ok() && decision->find("\"abort\"") != std::string::npos) {
          RESHARD_RETURN_NOT_OK(u.OthersFailed());
          return Status::Aborted(u.Where() + " was aborted");
        }
        return false;
      },
      [] { return std::string("rank 0 to commit"); }));
  RESHARD_ASSIGN_OR_RETURN(auto published, ReadManifest(manifest_key));
  if (published.manifest_digest() != plan.manifest().manifest_digest()) {
    return Status::AlreadyExists("conflicting weight revision: " +
                                 manifest_key);
  }
  return published;
}

Result<StoredWeightManifest> WeightStore::UploadShare(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    const ShareUploadOptions& options) {
  return UploadShareOf(source, bindings, nullptr, options);
}

Result<StoredWeightManifest> WeightStore::UploadShare(
    const WeightPlacementManifest& source, const CheckedBindings& bindings,
    const ShareUploadOptions& options) {
  RESHARD_RETURN_NOT_OK(
      bindings.RequireFor(source).WithContext("source bindings"));
  return UploadShareOf(source, bindings.bindings(), &bindings, options);
}

Result<StoredWeightManifest> WeightStore::UploadShareOf(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    const CheckedBindings* checked, const ShareUploadOptions& options) {
  if (options.ranks < 1 || options.rank < 0 || options.rank >= options.ranks) {
    return Status::InvalidArgument(
        "upload rank " + std::to_string(options.rank) + " is not in [0, " +
        std::to_string(options.ranks) + ")");
  }
  if (options.upload_id.empty()) {
    return Status::InvalidArgument("a shared upload needs an upload_id");
  }
  const std::string txn =
      internal::Sha256Hex("weight-upload-share|" + source.placement_id() + "|" +
                          options.upload_id)
          .substr(0, 32);
  const RevisionKeys keys =
      internal::StoreKeys(options_.key_prefix, options_.namespace_)
          .Revision(source.resource_id(), source.revision(),
                    source.weight_generation());
  // CUDA sources without a device: refused before any record.
  RESHARD_RETURN_NOT_OK(internal::DeviceApiFor(bindings, "store upload",
                                               "source", options_.device_api)
                            .status());
  internal::ShareUpload u(*backend_, options, keys, txn);
  if (checked != nullptr) u.own() = *checked;
  // The started record first, so that Gc's grace covers the share records.
  Status st = backend_->Put(keys.Started(txn),
                            internal::StartedRecord(options_.now_seconds()));
  if (!st.ok() && !st.IsAlreadyExists()) return st;
  st = backend_->Put(u.Key("shares", options.rank),
                     ShareRecord(options.rank, bindings));
  if (st.IsAlreadyExists()) {
    return Status::AlreadyExists(u.Where() + ": rank " +
                                 std::to_string(options.rank) +
                                 " already took part in it (each attempt "
                                 "needs a new upload_id)");
  }
  RESHARD_RETURN_NOT_OK(st);

  RESHARD_ASSIGN_OR_RETURN(UploadPlan plan, ShareUploadPlan(source, u));

  // Every rank: its own fragments, then its receipts. Rank 0 checked its
  // bindings with everybody's; the others check theirs here, once.
  std::vector<std::string> own;
  for (const auto& b : bindings) own.push_back(b.participant_id());
  auto mine = u.all()   ? Result<CheckedBindings>(u.all()->Only(own))
              : u.own() ? Result<CheckedBindings>(*u.own())
                        : CheckedBindings::Make(source, bindings,
                                                BindingCoverage::kSubset);
  auto r = mine.ok() ? Upload(plan, source, *mine)
                     : Result<std::vector<UploadReceipt>>(mine.status());
  if (!r.ok()) {
    if (options.rank == 0) (void)Abort(plan);
    return u.Fail(r.status());
  }
  if (Status p = PublishReceipts(plan, *r); !p.ok()) {
    if (options.rank == 0) (void)Abort(plan);
    return u.Fail(p);
  }

  return CommitShareUpload(plan, u);
}

}  // namespace reshard
