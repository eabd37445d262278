// WeightStore::Upload and Import: each writer fences itself against the
// plan and writes its stored fragments (checksum record, then payload),
// refusing to write into a transaction that chose abort.

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "exec_cuda/fragment_staging.h"
#include "reshard/plan.h"
#include "reshard/weight_store.h"
#include "store/checksum.h"
#include "store/device_staging.h"
#include "store/keys.h"
#include "store/progress.h"
#include "store/records.h"
#include "store/revision_files.h"
#include "store/revision_state.h"
#include "util/dims_text.h"

namespace reshard {

namespace {

using internal::KeysOf;
using internal::ReadDecision;
using internal::UploadDecision;

}  // namespace

namespace {

// Rule 65: the placement fragment an operation reads holds exactly the
// stored fragment's box (a tampered plan must not store one box's bytes
// under another's id).
Status CheckOperationGeometry(const WeightPlacementManifest& source,
                              const UploadOperation& op,
                              const StoredFragment& s) {
  // The caller found the fragment in the participant's validated binding,
  // which holds exactly that participant's placement fragments.
  const PlacementFragment* pf = source.FindFragment(op.placement_fragment_id);
  if (pf == nullptr) {
    return Status::InvalidArgument(
        "upload operation names no fragment of its participant: " +
        op.placement_fragment_id + " of " + op.participant_id);
  }
  if (pf->tensor_id() != s.tensor_id ||
      pf->global_offset() != s.global_offset ||
      pf->local_shape() != s.local_shape || pf->nbytes() != s.nbytes ||
      s.object_offset != 0) {
    return Status::InvalidArgument(
        "upload operation source and stored fragment geometry differ: " +
        op.placement_fragment_id + " -> " + s.stored_fragment_id);
  }
  return Status::OK();
}

// The writer record of `binding`'s participant, fenced: its generation,
// instance and lease must be the plan's. nullptr: it writes nothing.
Result<const UploadWriter*> FenceWriter(
    const UploadPlan& plan, const WeightRuntimeBindingManifest& binding) {
  if (binding.generation() != plan.generation()) {
    return Status::FailedPrecondition(
        "stale source lease: participant " + binding.participant_id() +
        " is at generation " + std::to_string(binding.generation()) +
        ", the upload plan at " + std::to_string(plan.generation()));
  }
  const bool writes =
      std::any_of(plan.operations().begin(), plan.operations().end(),
                  [&](const UploadOperation& op) {
                    return op.participant_id == binding.participant_id();
                  });
  if (!writes) return nullptr;
  const UploadWriter* writer = nullptr;
  for (const UploadWriter& w : plan.writers()) {
    if (w.participant_id == binding.participant_id()) writer = &w;
  }
  if (writer == nullptr) {
    return Status::InvalidArgument("upload plan has no writer record for " +
                                   binding.participant_id());
  }
  if (writer->instance_id != binding.instance_id() ||
      writer->lease_id != binding.lease_id()) {
    return Status::FailedPrecondition(
        "stale source lease: participant " + binding.participant_id() +
        " holds lease " + binding.lease_id() + " of instance " +
        binding.instance_id() + ", the upload plan was made at lease " +
        writer->lease_id + " of instance " + writer->instance_id);
  }
  return writer;
}

// A stored fragment, the bound source memory it is written from and the
// participant writing it.
struct UploadItem {
  const StoredFragment* stored;
  const RuntimeBindingFragment* fragment;
  const std::string* participant_id;
};
using UploadWork = std::vector<UploadItem>;

// The participant's operations, every one checked before the first byte
// is written; appended to `work`. CUDA sources only with `device_staging`.
Status CollectUploadWork(const UploadPlan& plan,
                         const WeightPlacementManifest& source,
                         const WeightRuntimeBindingManifest& binding,
                         bool device_staging, UploadWork* work) {
  std::vector<MemoryKind> movable = {MemoryKind::kHost};
  if (device_staging) movable.push_back(MemoryKind::kCuda);
  for (const UploadOperation& op : plan.operations()) {
    if (op.participant_id != binding.participant_id()) continue;
    const StoredFragment& s = plan.manifest().fragments()[op.stored_fragment];
    const RuntimeBindingFragment* f =
        binding.FindFragment(op.placement_fragment_id);
    if (f == nullptr) {
      return Status::FailedPrecondition("missing planned source fragment: " +
                                        op.placement_fragment_id);
    }
    if (f->nbytes() != s.nbytes) {
      return Status::FailedPrecondition("stale source fragment: " +
                                        op.placement_fragment_id);
    }
    RESHARD_RETURN_NOT_OK(CheckOperationGeometry(source, op, s));
    RESHARD_RETURN_NOT_OK(RequireMemoryKind(
        *f, movable, "store upload", "source", binding.participant_id()));
    work->push_back({&s, f, &binding.participant_id()});
  }
  return Status::OK();
}

// No writes into a transaction that chose abort (a late writer would leave
// payloads nobody references); checked before every object.
Status RequireNotAborted(ObjectStore& b, const UploadPlan& plan) {
  RESHARD_ASSIGN_OR_RETURN(
      auto decided,
      ReadDecision(b, KeysOf(plan.manifest()).Decision(plan.transaction_id())));
  if (decided == UploadDecision::kAbort) {
    return Status::FailedPrecondition("weight upload transaction " +
                                      plan.transaction_id() +
                                      " was aborted: no more payload writes");
  }
  return Status::OK();
}

// The checksum record first, then the payload, both durable at commit (one
// Sync for the whole upload). A retry after a crash finds the record and
// requires the same checksums; the payload is atomic.
Status WriteStoredFragment(ObjectStore& b, const WeightStoreOptions& options,
                           const UploadPlan& plan, const StoredFragment& s,
                           const uint8_t* data) {
  const std::string sums =
      internal::ChecksumRecord(data, s.nbytes, options.chunk_bytes);
  const std::string sums_key =
      KeysOf(plan.manifest())
          .Checksum(plan.transaction_id(), s.stored_fragment_id);
  Status st = b.PutObject(sums_key, {{sums.data(), sums.size()}},
                          Durability::kAtNextSync);
  if (st.IsAlreadyExists()) {
    RESHARD_ASSIGN_OR_RETURN(auto old, b.Get(sums_key));
    if (old != sums) {
      return Status::AlreadyExists("payload exists with other bytes: " +
                                   s.object_key);
    }
  } else {
    RESHARD_RETURN_NOT_OK(st);
  }
  st = b.PutObject(s.object_key, {{data, s.nbytes}}, Durability::kAtNextSync);
  if (!st.ok() && !st.IsAlreadyExists()) return st;
  return Status::OK();
}

}  // namespace

Result<std::vector<UploadReceipt>> WeightStore::Upload(
    const UploadPlan& plan, const WeightPlacementManifest& source,
    const WeightRuntimeBindingManifest& binding) {
  if (source.placement_id() != plan.source_placement_id_) {
    return Status::InvalidArgument("source placement identity mismatch");
  }
  RESHARD_ASSIGN_OR_RETURN(
      CheckedBindings checked,
      CheckedBindings::Make(source, {binding}, BindingCoverage::kSubset));
  return Upload(plan, source, checked);
}

Result<std::vector<UploadReceipt>> WeightStore::Upload(
    const UploadPlan& plan, const WeightPlacementManifest& source,
    const CheckedBindings& bindings) {
  if (source.placement_id() != plan.source_placement_id_) {
    return Status::InvalidArgument("source placement identity mismatch");
  }
  RESHARD_RETURN_NOT_OK(bindings.RequireFor(source));
  // CUDA sources need a device to stage from: refused before any write.
  RESHARD_ASSIGN_OR_RETURN(
      std::shared_ptr<cuda::DeviceApi> device,
      internal::DeviceApiFor(bindings.bindings(), "store upload", "source",
                             options_.device_api));
  UploadWork work;
  for (const WeightRuntimeBindingManifest& binding : bindings.bindings()) {
    RESHARD_ASSIGN_OR_RETURN(const UploadWriter* writer,
                             FenceWriter(plan, binding));
    if (writer == nullptr) continue;
    RESHARD_RETURN_NOT_OK(
        CollectUploadWork(plan, source, binding, device != nullptr, &work));
  }
  uint64_t total = 0;
  for (const UploadItem& w : work) total += w.stored->nbytes;
  internal::ProgressMeter progress(options_.progress, total);
  internal::UploadStaging staging(std::move(device));
  std::vector<UploadReceipt> receipts;
  for (const UploadItem& w : work) {
    const StoredFragment& s = *w.stored;
    RESHARD_RETURN_NOT_OK(RequireNotAborted(*backend_, plan));
    RESHARD_ASSIGN_OR_RETURN(const uint8_t* data, staging.Host(*w.fragment));
    RESHARD_RETURN_NOT_OK(
        WriteStoredFragment(*backend_, options_, plan, s, data));
    if (options_.on_stage) options_.on_stage("payload");
    receipts.push_back({s.stored_fragment_id, s.object_key, *w.participant_id});
    progress.Add(s.nbytes);
  }
  progress.Finish();
  return receipts;
}

Result<std::vector<UploadReceipt>> WeightStore::Import(
    const UploadPlan& plan, const WeightPlacementManifest& source,
    FragmentReader& reader) {
  if (source.placement_id() != plan.source_placement_id_) {
    return Status::InvalidArgument("source placement identity mismatch");
  }
  uint64_t largest = 0, total = 0;
  for (const UploadOperation& op : plan.operations()) {
    const uint64_t n = plan.manifest().fragments()[op.stored_fragment].nbytes;
    largest = std::max(largest, n);
    total += n;
  }
  internal::ProgressMeter progress(options_.progress, total);
  std::vector<uint8_t> buffer(largest);
  std::vector<UploadReceipt> receipts;
  for (const UploadOperation& op : plan.operations()) {
    const StoredFragment& s = plan.manifest().fragments()[op.stored_fragment];
    RESHARD_RETURN_NOT_OK(CheckOperationGeometry(source, op, s));
    RESHARD_RETURN_NOT_OK(RequireNotAborted(*backend_, plan));
    RESHARD_RETURN_NOT_OK(
        reader
            .Read(*source.FindFragment(op.placement_fragment_id), buffer.data())
            .WithContext("reading " + op.placement_fragment_id));
    RESHARD_RETURN_NOT_OK(
        WriteStoredFragment(*backend_, options_, plan, s, buffer.data()));
    if (options_.on_stage) options_.on_stage("payload");
    receipts.push_back({s.stored_fragment_id, s.object_key, op.participant_id});
    progress.Add(s.nbytes);
  }
  progress.Finish();
  return receipts;
}

}  // namespace reshard
