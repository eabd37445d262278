// The weight store: a complete DP replica of a live model persisted as
// source-native fragments, published as an immutable revision, loaded into
// any other layout with ranged reads straight into the target buffers.
//
// Protocol (docs/store-format.md, "Upload, commit, abort"):
//   PrepareUpload  selects one complete, generation-consistent source DP
//                  replica and spreads its fragments over every source
//                  participant holding identical bytes;
//   Upload         each participant writes its fragments (payload object +
//                  checksum record) and returns receipts;
//   Commit         first decision wins (create-only decision record), then
//                  the manifest is published create-only; idempotent on
//                  retry; a writer that loses to another manifest removes
//                  its own payloads;
//   Abort          claims "abort" and removes its payloads; never touches a
//                  published revision.
// A revision is IMPORTING until its manifest exists, then READY. Loads hold
// a lease record; Remove refuses a leased revision; Gc removes payloads of
// aborted and abandoned (undecided) uploads, publishes uploads that decided
// to commit but died before publishing, and never removes anything a
// manifest references.
//
// Keys (docs/store-format.md, "Keys" and "Records"; built in one place,
// src/store/layout.h):
//   <prefix>/<q(namespace)>/<q(resource)>/<q(revision)>/<generation>/
//     manifest                          the published StoredWeightManifest
//     payload/<txn>/<fragment_id>       one object per stored fragment
//     checksums/<txn>/<fragment_id>     XXH3-64 per chunk of that object
//     transactions/<txn>/started        upload start (for gc's grace)
//     transactions/<txn>/decision       "commit" or "abort", first wins
//     transactions/<txn>/pending-manifest  the manifest to publish (commit)
//     transactions/<txn>/plan           the upload plan (multi-process)
//     transactions/<txn>/receipts/<fid> one writer's receipts (multi-process)
//     leases/<lease_id>                 a load in progress, until it expires

#ifndef RESHARD_WEIGHT_STORE_H_
#define RESHARD_WEIGHT_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/binding.h"
#include "reshard/conversion.h"
#include "reshard/placement.h"
#include "reshard/sdk/object_store.h"
#include "reshard/status.h"
#include "reshard/store_uri.h"
#include "reshard/stored_manifest.h"

namespace reshard {

namespace cuda {
class DeviceApi;  // the CUDA executor's device-API seam (internal)
}  // namespace cuda

// Progress of a long operation: `done` of `total` bytes (0 <= done <=
// total; total fixed for the operation). Called on the operation's own
// threads (never two calls at once), first with done == 0 and last with
// done == total when it succeeds, at most about 256 times per operation
// plus ten a second; it must return quickly and not call back into the
// object doing the work.
using ProgressCallback = std::function<void(uint64_t done, uint64_t total)>;

struct WeightStoreOptions {
  std::string key_prefix = "weights";
  std::string namespace_ = "default";
  // Checksum granularity; loads verify whole chunks.
  uint64_t chunk_bytes = uint64_t{1} << 20;
  // Loads: largest single read, and byte runs per backend request (ranges
  // that continue each other, read as one run, count once).
  uint64_t max_range_bytes = uint64_t{64} << 20;
  uint32_t max_ranges_per_request = 1024;
  // Loads: staging for strided regions and chunk edges (bounded extra
  // memory whatever the model size).
  uint64_t staging_bytes = uint64_t{64} << 20;
  // Loads: strided rows averaging at least this many bytes are read
  // straight into the target rows (verified there), skipping the staging
  // copy; shorter rows are staged. 0: in place whenever each stored byte
  // has one target; UINT64_MAX: always staged.
  uint64_t min_scatter_bytes = uint64_t{4} << 10;
  // Loads: the size of a staging window (whole chunks, at most
  // staging_bytes / 2). Windows of 256 KiB or more are read, verified and
  // copied out by two threads in turn; the default stays in a core's cache
  // from read to copy. A backend that reads whole values at about the cost
  // of their parts (ObjectStore::PreferredReadBytes; Redis: one value)
  // gets windows of whole values instead, within staging_bytes / 2.
  uint64_t staged_window_bytes = uint64_t{1} << 20;
  std::chrono::seconds lease_ttl{86400};
  // Gc: an upload without a decision older than this is abandoned. (An
  // upload that decided to commit is never abandoned: Gc publishes it.)
  std::chrono::seconds gc_grace{3600};
  // Test and tool hook, called at "payload" (after each payload object),
  // "decision" (commit decided, manifest not yet published) and
  // "published".
  std::function<void(std::string_view stage)> on_stage;
  // The clock (unix seconds) of started records, leases, gc grace and
  // created_at; empty: the system clock. Tests inject one to age uploads
  // and leases without waiting.
  std::function<int64_t()> now_seconds;
  // Fresh upload transaction ids and lease ids (key components, unique per
  // call); empty: 32 and 16 random hex digits, reseeded in every process.
  std::function<std::string()> new_transaction_id;
  std::function<std::string()> new_lease_id;
  // Progress of each Load (target bytes delivered), Upload (the binding's
  // bytes written), Import (bytes read and written) and Verify (payload
  // bytes checked), and in counts of Remove (the revision's keys removed)
  // and Gc (uploads examined); empty: none.
  ProgressCallback progress;
  // Loads: convert target tensors whose dtype differs from the revision's
  // (docs/conversion.md; quantization blocks of fp8_block). The read
  // windows fill staging buffers of the converting fragments (in the
  // revision's dtype), which then convert into the targets. Without it a
  // differing dtype is refused naming the tensor.
  bool convert = false;
  Fp8Block fp8_block;
  // Converting loads stage the converting tensors in groups of whole
  // tensors of at most this many bytes (this process's share, in the
  // revision's dtype), each converted before the next is read: the memory
  // a converting load adds (a larger tensor is a group of its own).
  uint64_t convert_staging_bytes = uint64_t{256} << 20;
  // CUDA memory (fragments bound to "cuda" or "cuda:<ordinal>"): loads
  // read into pinned host staging and copy it to the devices, in groups of
  // whole tensors whose CUDA fragments (this process's) take at most this
  // many bytes (a larger tensor is a group of its own); uploads copy one
  // CUDA source fragment at a time into pinned staging and write it from
  // there. Without a CUDA executor (a build without CUDA, a machine
  // without a device) both refuse CUDA fragments before writing anything,
  // naming the first (docs/gpu.md).
  uint64_t device_staging_bytes = uint64_t{256} << 20;
  // Internal: the device API that staging goes through; empty: the CUDA
  // runtime's. Tests set the host emulation (src/exec_cuda/).
  std::shared_ptr<cuda::DeviceApi> device_api;
};

struct UploadOperation {
  size_t stored_fragment = 0;  // index into the manifest's fragments
  std::string participant_id;  // the source participant that writes it
  std::string placement_fragment_id;
};

// The binding identity a participant's uploads are fenced at: a writer
// whose lease or instance changed since PrepareUpload writes nothing.
struct UploadWriter {
  std::string participant_id;
  std::string instance_id;
  std::string lease_id;
  friend bool operator==(const UploadWriter&, const UploadWriter&) = default;
};

class UploadPlan {
 public:
  const StoredWeightManifest& manifest() const { return *manifest_; }
  const std::string& transaction_id() const { return transaction_id_; }
  const std::vector<UploadOperation>& operations() const { return ops_; }
  // The runtime binding generation every upload is fenced at (the
  // revision's weight generation is manifest().weight_generation()).
  uint64_t generation() const { return generation_; }
  // One per participant with operations, sorted by participant_id.
  const std::vector<UploadWriter>& writers() const { return writers_; }
  // Bytes each participant writes.
  uint64_t BytesOf(std::string_view participant_id) const;

 private:
  friend class WeightStore;
  std::shared_ptr<const StoredWeightManifest> manifest_;
  std::string transaction_id_;
  std::string source_placement_id_;
  uint64_t generation_ = 0;
  std::vector<UploadOperation> ops_;
  std::vector<UploadWriter> writers_;
};

struct UploadReceipt {
  std::string stored_fragment_id;
  std::string object_key;
  std::string participant_id;
  friend bool operator==(const UploadReceipt&, const UploadReceipt&) = default;
};

struct LoadReport {
  uint64_t bytes = 0;          // bytes written to targets
  uint64_t bytes_read = 0;     // bytes read from the backend
  uint64_t read_requests = 0;  // backend ReadRanges calls
  uint64_t ranges = 0;         // byte runs in those calls (ranges that
                               // continue each other count once)
  uint64_t chunks_verified = 0;
  uint64_t regions = 0;
  // Of `bytes`, those copied in memory (from staging, or from a replica
  // already loaded) rather than read straight into place.
  uint64_t bytes_copied = 0;
  // Staging memory the load allocated (chunk edges and staged windows; 0
  // when every byte was read straight into place); at most the options'
  // staging_bytes plus one chunk.
  uint64_t staging_bytes = 0;
  // Converting loads: host memory of the largest group of converting
  // tensors staged at once (in the source's dtypes), at most
  // convert_staging_bytes unless one tensor's share is larger.
  uint64_t conversion_bytes = 0;
};

// Calls visit(name, value) for every field of `r`, names sorted: the one
// statement of the report's fields, which the CLI's --json and Python's
// dicts both write (tools/cli_common.h, src/python/report_dict.h).
template <typename Visit>
void VisitFields(const LoadReport& r, Visit&& visit) {
  visit("bytes", r.bytes);
  visit("bytes_copied", r.bytes_copied);
  visit("bytes_read", r.bytes_read);
  visit("chunks_verified", r.chunks_verified);
  visit("conversion_bytes", r.conversion_bytes);
  visit("ranges", r.ranges);
  visit("read_requests", r.read_requests);
  visit("regions", r.regions);
  visit("staging_bytes", r.staging_bytes);
}

struct RevisionInfo {
  std::string manifest_key;
  std::string resource_id;
  std::string revision;
  uint64_t weight_generation = 0;
  // "READY", "IMPORTING" or "CORRUPT" (a manifest that cannot be read or
  // does not describe its own revision; only manifest_key and error are
  // set).
  std::string state;
  uint64_t fragments = 0;
  uint64_t bytes = 0;
  uint32_t leases = 0;  // unexpired lease records (or unreadable ones)
  std::string error;    // why a CORRUPT revision cannot be read; else ""
};

// Every field of `r`, names sorted (see VisitFields(LoadReport)); `error`
// is "" but for a CORRUPT revision.
template <typename Visit>
void VisitFields(const RevisionInfo& r, Visit&& visit) {
  visit("bytes", r.bytes);
  visit("error", r.error);
  visit("fragments", r.fragments);
  visit("leases", r.leases);
  visit("manifest_key", r.manifest_key);
  visit("resource_id", r.resource_id);
  visit("revision", r.revision);
  visit("state", r.state);
  visit("weight_generation", r.weight_generation);
}

// A revision or upload a maintenance operation left alone because it could
// not read or process it, and why.
struct StoreProblem {
  std::string key;  // a manifest key, or "<base>/<txn>" of an upload
  std::string error;
};

// Every field of `p`, names sorted (see VisitFields(LoadReport)).
template <typename Visit>
void VisitFields(const StoreProblem& p, Visit&& visit) {
  visit("error", p.error);
  visit("key", p.key);
}

struct VerifyReport {
  uint64_t objects = 0;
  uint64_t bytes = 0;
  uint64_t chunks = 0;
};

// Every field of `r`, names sorted (see VisitFields(LoadReport)).
template <typename Visit>
void VisitFields(const VerifyReport& r, Visit&& visit) {
  visit("bytes", r.bytes);
  visit("chunks", r.chunks);
  visit("objects", r.objects);
}

struct GcReport {
  uint64_t keys_removed = 0;
  uint64_t bytes_removed = 0;
  std::vector<std::string> transactions_removed;
  // Partial objects of interrupted writers (older than gc_grace).
  uint64_t temporaries_removed = 0;
  // Uploads that had decided to commit and were published by Gc.
  std::vector<std::string> transactions_completed;
  // Corrupt revisions (nothing under them is collected: their manifest may
  // reference anything there) and uploads Gc could not process.
  std::vector<StoreProblem> skipped;
};

// Every field of `r`, names sorted (see VisitFields(LoadReport)): `store
// gc --json` and Python's gc() both write it.
template <typename Visit>
void VisitFields(const GcReport& r, Visit&& visit) {
  visit("bytes_removed", r.bytes_removed);
  visit("keys_removed", r.keys_removed);
  visit("skipped", r.skipped);
  visit("temporaries_removed", r.temporaries_removed);
  visit("transactions_completed", r.transactions_completed);
  visit("transactions_removed", r.transactions_removed);
}

// A source of fragment bytes that is not live memory (a checkpoint on
// disk): WeightStore::Import reads each fragment through it.
class FragmentReader {
 public:
  virtual ~FragmentReader() = default;
  // Fills `dest` with the fragment's nbytes bytes (contiguous row-major).
  virtual Status Read(const PlacementFragment& fragment, void* dest) = 0;
};

// One process's part of an upload whose source participants are spread
// over several processes (WeightStore::UploadShare).
struct ShareUploadOptions {
  // Names the upload attempt: the same in every process of the upload and
  // new for each attempt (a retry after a failure needs a new id). The
  // transaction id is derived from it and the placement id.
  std::string upload_id;
  int rank = 0;   // this process; rank 0 coordinates (prepares, commits)
  int ranks = 1;  // processes taking part
  // How long a process waits for the others at each step.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds poll_interval{20};
};

namespace internal {
class ShareUpload;
}  // namespace internal

class WeightStore {
 public:
  static Result<WeightStore> Open(std::string_view uri,
                                  WeightStoreOptions options = {});
  static Result<WeightStore> Open(std::shared_ptr<ObjectStore> backend,
                                  WeightStoreOptions options = {});

  ObjectStore& backend() const { return *backend_; }
  const WeightStoreOptions& options() const { return options_; }
  // The same store (backend shared) with other options, e.g. a progress
  // callback for one load; hooks left empty (now_seconds, ids) take their
  // defaults as in Open.
  WeightStore WithOptions(WeightStoreOptions options) const;

  // Plain bindings are checked once here (errors prefixed "source
  // bindings: "); CheckedBindings (for example from BindAllBuffers) are
  // not checked again, only that they were checked for `source`.
  Result<UploadPlan> PrepareUpload(
      const WeightPlacementManifest& source,
      const std::vector<WeightRuntimeBindingManifest>& bindings);
  Result<UploadPlan> PrepareUpload(const WeightPlacementManifest& source,
                                   const CheckedBindings& bindings);
  // Writes the fragments assigned to `binding`'s participant, after
  // checking the binding (once) and its generation, instance, lease and
  // fragments (memory kind and geometry) against the plan. Refused once
  // the transaction decided to abort; after a commit decision only
  // identical bytes are accepted.
  Result<std::vector<UploadReceipt>> Upload(
      const UploadPlan& plan, const WeightPlacementManifest& source,
      const WeightRuntimeBindingManifest& binding);
  // The same for every binding of a checked set (not checked again), every
  // writer fenced before the first byte is written, one progress over all.
  Result<std::vector<UploadReceipt>> Upload(
      const UploadPlan& plan, const WeightPlacementManifest& source,
      const CheckedBindings& bindings);
  Status Commit(const UploadPlan& plan,
                const std::vector<UploadReceipt>& receipts);

  // Multi-process uploads: the coordinator publishes the plan in the store
  // (transactions/<txn>/plan); each worker process reads it back with
  // ReadUploadPlan, uploads its own fragments and publishes its receipts
  // (PublishReceipts, transactions/<txn>/receipts/<fid>); the coordinator
  // gathers them (GatherReceipts, all or FailedPrecondition naming the
  // missing fragment) and commits.
  Status PublishUploadPlan(const UploadPlan& plan);
  Result<UploadPlan> ReadUploadPlan(std::string_view manifest_key,
                                    std::string_view transaction_id);
  Status PublishReceipts(const UploadPlan& plan,
                         const std::vector<UploadReceipt>& receipts);
  Result<std::vector<UploadReceipt>> GatherReceipts(const UploadPlan& plan);
  Status Abort(const UploadPlan& plan);

  // The multi-process protocol above with the processes meeting in the
  // store itself (docs/store-format.md, "Uploads from several processes").
  // Every process calls it with the same placement and options.upload_id,
  // its own rank and its own bindings (any of the placement's
  // participants, none for a process that holds nothing): each publishes
  // its bindings (transactions/<txn>/shares/<rank>); rank 0 prepares from
  // all of them and publishes the plan; each uploads the fragments the
  // plan assigns to its participants and publishes its receipts; rank 0
  // gathers and commits. Returns the committed manifest in every process,
  // once it is published. A process that fails records why
  // (transactions/<txn>/failed/<rank>); rank 0 then aborts and every
  // process fails naming that rank and its error. Waiting longer than
  // options.timeout at any step is DeadlineExceeded naming the ranks
  // waited for.
  // Each binding is checked once: rank 0 checks every rank's bindings
  // (not its own again when they come as CheckedBindings), the other ranks
  // their own (none when they come as CheckedBindings).
  Result<StoredWeightManifest> UploadShare(
      const WeightPlacementManifest& source,
      const std::vector<WeightRuntimeBindingManifest>& bindings,
      const ShareUploadOptions& options);
  Result<StoredWeightManifest> UploadShare(
      const WeightPlacementManifest& source, const CheckedBindings& bindings,
      const ShareUploadOptions& options);

  // Imports from a FragmentReader instead of live memory. PrepareImport
  // plans one stored fragment per box of the source's lowest DP replica,
  // written by the participant holding it (fenced by the plan alone: the
  // writers' instance and lease are "import"); Import reads each through
  // one buffer of the largest fragment's size, checksums and writes it
  // (refused once the transaction decided to abort). Commit as after
  // Upload. Memory: the largest fragment, so a source split into small
  // fragments imports in small memory.
  Result<UploadPlan> PrepareImport(const WeightPlacementManifest& source);
  Result<std::vector<UploadReceipt>> Import(
      const UploadPlan& plan, const WeightPlacementManifest& source,
      FragmentReader& reader);

  // A published manifest (strict: its key must match, its group must be the
  // revision at that key, every payload must be <group>/payload/<txn>/<id>;
  // otherwise DataLoss).
  Result<StoredWeightManifest> ReadManifest(std::string_view manifest_key);
  // Plans `target` from the manifest and reads straight into the bound
  // target buffers, verifying every delivered chunk. Holds a lease for the
  // duration. On error the targets are not loaded (contents unspecified).
  // Plain bindings are checked once here; CheckedBindings are not checked
  // again, only that they were checked for `target`.
  Result<LoadReport> Load(
      const StoredWeightManifest& manifest,
      const WeightPlacementManifest& target,
      const std::vector<WeightRuntimeBindingManifest>& target_bindings);
  Result<LoadReport> Load(const StoredWeightManifest& manifest,
                          const WeightPlacementManifest& target,
                          const CheckedBindings& target_bindings);

  // Every revision under the key prefix; a manifest that cannot be read is
  // listed as CORRUPT (with its error), not an error of the listing.
  Result<std::vector<RevisionInfo>> List();
  // The manifest keys of `resource_id`'s published revisions in this
  // namespace, sorted; one listing, no manifest read (what a process
  // waiting for a new revision polls).
  Result<std::vector<std::string>> ManifestKeys(std::string_view resource_id);
  // Re-reads every payload of the revision and checks every checksum; an
  // error means the revision is corrupt (or unreadable).
  Result<VerifyReport> Verify(std::string_view manifest_key);
  // Removes a published revision, READY or CORRUPT; refuses while a load
  // holds a lease (FailedPrecondition) or a lease record cannot be read
  // (DataLoss naming it). Removes only keys under the manifest key's own
  // revision (never keys a tampered manifest names elsewhere).
  Status Remove(std::string_view manifest_key);
  // Collects abandoned uploads; corrupt revisions and uploads it cannot
  // process are reported in `skipped` and left alone, the rest collected.
  Result<GcReport> Gc();

 private:
  // Load without conversions (a differing dtype is refused by the plan).
  Result<LoadReport> LoadUnconverted(
      const StoredWeightManifest& manifest,
      const WeightPlacementManifest& target,
      const std::vector<WeightRuntimeBindingManifest>& target_bindings);
  // PrepareUpload under a given transaction id; a started record already
  // there (written by another process of the upload) is kept.
  Result<UploadPlan> PrepareUploadAs(const WeightPlacementManifest& source,
                                     const CheckedBindings& bindings,
                                     std::string transaction_id);
  // UploadShare of `bindings`, checked already when `checked` is given.
  Result<StoredWeightManifest> UploadShareOf(
      const WeightPlacementManifest& source,
      const std::vector<WeightRuntimeBindingManifest>& bindings,
      const CheckedBindings* checked, const ShareUploadOptions& options);
  // UploadShare's two halves (share_upload.cc).
  Result<UploadPlan> ShareUploadPlan(const WeightPlacementManifest& source,
                                     internal::ShareUpload& u);
  Result<StoredWeightManifest> CommitShareUpload(const UploadPlan& plan,
                                                 internal::ShareUpload& u);
  WeightStore(std::shared_ptr<ObjectStore> backend, WeightStoreOptions o)
      : backend_(std::move(backend)), options_(std::move(o)) {}
  std::shared_ptr<ObjectStore> backend_;
  WeightStoreOptions options_;
};

}  // namespace reshard

#endif  // RESHARD_WEIGHT_STORE_H_
