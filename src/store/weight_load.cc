// WeightStore::Load: stored manifest + target placement -> plan -> bounded,
// verified ranged reads straight into the target buffers.
//
// Per stored fragment (one payload object), regions whose both sides are
// contiguous are read directly into the target (whole checksum chunks; the
// partial chunks at their edges through a one-chunk buffer). Strided
// regions are served by one sequential sweep over the object in
// chunk-aligned spans of at most `staging_bytes`: each span is read once,
// verified, and scattered to every region with rows in it, so no read is
// ever issued per row and every stored byte is read at most once per load.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>

#include "bind/strided_stream.h"
#include "reshard/plan.h"
#include "reshard/weight_store.h"
#include "store/checksum.h"
#include "store/layout.h"
#include "store/records.h"

namespace reshard {
namespace {

using internal::ChunkSums;
using internal::StridedSide;

// One region to serve from its stored fragment: object offset of its first
// row, its source side (offsets relative to that) and its target side.
struct Work {
  uint64_t object_base = 0;
  StridedSide source;  // base == nullptr: offsets only
  StridedSide target;
  uint64_t rows = 0;
  // Sweep cursor: next row and byte within it.
  uint64_t row = 0;
  uint64_t within = 0;
  uint64_t NextOffset() const {
    return object_base + internal::RowOffset(source, row) + within;
  }
};

class Loader {
 public:
  Loader(ObjectStore& backend, const WeightStoreOptions& options,
         LoadReport* report)
      : b_(backend), o_(options), report_(report) {}

  Status Run(const std::string& object_key, const std::string& fragment_id,
             const ChunkSums& sums, std::vector<Work>& direct,
             std::vector<Work>& staged) {
    key_ = &object_key;
    fid_ = &fragment_id;
    sums_ = &sums;
    for (Work& w : direct) RESHARD_RETURN_NOT_OK(Direct(w));
    RESHARD_RETURN_NOT_OK(Flush());
    return Sweep(staged);
  }

 private:
  // A contiguous region: whole chunks straight into the target, edges via
  // the chunk buffer.
  Status Direct(const Work& w) {
    const uint64_t c = sums_->chunk_bytes;
    const uint64_t begin = w.object_base;
    const uint64_t end = begin + w.source.total_bytes;
    uint8_t* dest = w.target.base;
    const uint64_t first_full = (begin + c - 1) / c * c;
    uint64_t last_full = end / c * c;
    if (end == sums_->size) last_full = end;  // the short last chunk
    if (first_full >= last_full) {
      return Edge(begin, end, dest);
    }
    if (begin < first_full)
      RESHARD_RETURN_NOT_OK(Edge(begin, first_full, dest));
    for (uint64_t at = first_full; at < last_full;) {
      const uint64_t n = std::min<uint64_t>(
          std::max<uint64_t>(o_.max_range_bytes / c, 1) * c, last_full - at);
      pending_.push_back({*key_, at, n, dest + (at - begin)});
      at += n;
      if (pending_.size() >= o_.max_ranges_per_request)
        RESHARD_RETURN_NOT_OK(Flush());
    }
    if (last_full < end)
      RESHARD_RETURN_NOT_OK(Edge(last_full, end, dest + (last_full - begin)));
    return Status::OK();
  }

  // Object bytes [begin, end) within one chunk, through the chunk buffer.
  Status Edge(uint64_t begin, uint64_t end, uint8_t* dest) {
    const uint64_t c = sums_->chunk_bytes;
    const uint64_t chunk = begin / c * c;
    const uint64_t n = std::min(c, sums_->size - chunk);
    if (chunk_buf_.size() < c) chunk_buf_.resize(c);
    RESHARD_RETURN_NOT_OK(Read({{*key_, chunk, n, chunk_buf_.data()}}));
    RESHARD_RETURN_NOT_OK(
        internal::VerifyChunks(*sums_, chunk, chunk_buf_.data(), n, *key_,
                               *fid_, &report_->chunks_verified));
    std::memcpy(dest, chunk_buf_.data() + (begin - chunk), end - begin);
    return Status::OK();
  }

  Status Flush() {
    if (pending_.empty()) return Status::OK();
    RESHARD_RETURN_NOT_OK(Read(pending_));
    for (const ReadRange& r : pending_) {
      RESHARD_RETURN_NOT_OK(internal::VerifyChunks(
          *sums_, r.offset, static_cast<const uint8_t*>(r.dest), r.length,
          *key_, *fid_, &report_->chunks_verified));
    }
    pending_.clear();
    return Status::OK();
  }

  Status Read(const std::vector<ReadRange>& ranges) {
    ++report_->read_requests;
    report_->ranges += ranges.size();
    for (const ReadRange& r : ranges) report_->bytes_read += r.length;
    Status st = b_.ReadRanges(ranges);
    if (!st.ok()) return st.WithContext("stored fragment " + *fid_);
    return st;
  }

  // Strided regions: chunk-aligned spans in object order, each read once
  // into the staging buffer, verified and scattered.
  Status Sweep(std::vector<Work>& work) {
    const uint64_t c = sums_->chunk_bytes;
    const uint64_t span = o_.staging_bytes / c * c;
    while (true) {
      uint64_t next = UINT64_MAX;
      for (const Work& w : work) {
        if (w.row < w.rows) next = std::min(next, w.NextOffset());
      }
      if (next == UINT64_MAX) return Status::OK();
      const uint64_t begin = next / c * c;
      const uint64_t end = std::min(begin + span, sums_->size);
      if (staging_.size() < end - begin) staging_.resize(end - begin);
      RESHARD_RETURN_NOT_OK(
          Read({{*key_, begin, end - begin, staging_.data()}}));
      RESHARD_RETURN_NOT_OK(
          internal::VerifyChunks(*sums_, begin, staging_.data(), end - begin,
                                 *key_, *fid_, &report_->chunks_verified));
      for (Work& w : work) Scatter(w, begin, end);
    }
  }

  // Copies the rows (or parts) of `w` inside object bytes [begin, end).
  void Scatter(Work& w, uint64_t begin, uint64_t end) {
    const uint64_t inner = w.source.inner_bytes;
    while (w.row < w.rows) {
      const uint64_t at = w.NextOffset();
      if (at < begin || at >= end) return;
      const uint64_t n = std::min(inner - w.within, end - at);
      std::memcpy(
          w.target.base + internal::RowOffset(w.target, w.row) + w.within,
          staging_.data() + (at - begin), n);
      w.within += n;
      if (w.within == inner) {
        w.within = 0;
        ++w.row;
      }
    }
  }

  ObjectStore& b_;
  const WeightStoreOptions& o_;
  LoadReport* report_;
  const std::string* key_ = nullptr;
  const std::string* fid_ = nullptr;
  const ChunkSums* sums_ = nullptr;
  std::vector<ReadRange> pending_;
  std::vector<uint8_t> chunk_buf_;
  std::vector<uint8_t> staging_;
};

// A lease record held for the duration of a load.
class Lease {
 public:
  static Result<Lease> Take(ObjectStore& b, const internal::RevisionKeys& keys,
                            const WeightStoreOptions& options) {
    const int64_t expires = options.now_seconds() + options.lease_ttl.count();
    Lease l(b, keys.Lease(options.new_lease_id()));
    // Advisory: a lease need not survive a crash (nor does its load).
    const std::string value = internal::LeaseRecord(expires);
    RESHARD_RETURN_NOT_OK(b.PutObject(l.key_, {{value.data(), value.size()}},
                                      Durability::kAtNextSync));
    return l;
  }
  Lease(Lease&& o) noexcept : b_(o.b_), key_(std::move(o.key_)) {
    o.key_.clear();
  }
  ~Lease() {
    if (!key_.empty()) (void)b_.Delete(key_);
  }

 private:
  Lease(ObjectStore& b, std::string key) : b_(b), key_(std::move(key)) {}
  ObjectStore& b_;
  std::string key_;
};

// The load's target memory, by placement fragment id.
struct BoundTarget {
  const RuntimeBindingFragment* fragment;
  const WeightRuntimeBindingManifest* binding;
};

// The regions of one stored fragment (one payload object), split into
// direct and staged work.
struct PerObject {
  const StoredFragment* fragment = nullptr;
  std::vector<Work> direct, staged;
};

// Turns the plan's regions into work per payload object, after checking
// every target (memory kind, rule 56: no two loaded target views at one
// physical address, since a stored source never authorises target alias
// de-duplication) and every source (rule 67: a fragment of this manifest).
class LoadWorkBuilder {
 public:
  LoadWorkBuilder(const StoredWeightManifest& manifest,
                  const std::vector<WeightRuntimeBindingManifest>& bindings,
                  LoadReport* report)
      : report_(report) {
    for (const auto& b : bindings) {
      for (const auto& f : b.fragments()) {
        bound_[f.placement_fragment_id()] = {&f, &b};
      }
    }
    for (const auto& f : manifest.fragments())
      stored_[f.stored_fragment_id] = &f;
  }

  Status Add(const LogicalTransferPlan& plan, const TransferRegion& r) {
    const PlanFragment& tf = plan.target_fragments()[r.target_fragment];
    auto t = bound_.find(tf.fragment_id);
    if (t == bound_.end()) return Status::OK();  // not filled by this load
    RESHARD_RETURN_NOT_OK(CheckTarget(tf, t->second));
    const PlanFragment& sf = plan.source_fragments()[r.source_fragment];
    auto sit = stored_.find(sf.fragment_id);
    if (sit == stored_.end()) {
      return Status::Internal("load plan sources and manifest differ: " +
                              sf.fragment_id);
    }
    const StoredFragment* s = sit->second;
    BoundRegion br;
    br.source_address = 0;
    br.target_address = t->second.fragment->address() + r.target_base_offset;
    br.inner_bytes = r.inner_bytes;
    br.loops = r.loops;
    br.bytes = r.bytes;
    Work w;
    w.object_base = s->object_offset + r.source_base_offset;
    w.source = StridedSide::Source(br);
    w.target = StridedSide::Target(br);
    w.rows = r.inner_bytes == 0 ? 0 : r.bytes / r.inner_bytes;
    auto& per = objects_[s->stored_fragment_id];
    per.fragment = s;
    (w.source.contiguous() && w.target.contiguous() ? per.direct : per.staged)
        .push_back(std::move(w));
    report_->bytes += r.bytes;
    ++report_->regions;
    return Status::OK();
  }

  std::map<std::string_view, PerObject>& objects() { return objects_; }

 private:
  Status CheckTarget(const PlanFragment& tf, const BoundTarget& t) {
    const RuntimeBindingFragment& tv = *t.fragment;
    const auto space = std::tuple{std::string_view(t.binding->instance_id()),
                                  std::string_view(tv.worker_id()),
                                  std::string_view(tv.device()), tv.address()};
    auto [it, fresh] = written_.emplace(space, tf.fragment_id);
    if (!fresh && it->second != tf.fragment_id) {
      return Status::FailedPrecondition("conflicting target physical range: " +
                                        tf.fragment_id);
    }
    if (!fresh) return Status::OK();
    return RequireMemoryKind(tv, {MemoryKind::kHost}, "store load", "target",
                             t.binding->participant_id());
  }

  LoadReport* report_;
  std::unordered_map<std::string_view, BoundTarget> bound_;
  std::unordered_map<std::string_view, const StoredFragment*> stored_;
  std::map<std::string_view, PerObject> objects_;
  std::map<std::tuple<std::string_view, std::string_view, std::string_view,
                      uint64_t>,
           std::string_view>
      written_;
};

Status CheckLoadIdentity(
    const StoredWeightManifest& manifest, const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) {
  if (manifest.resource_id() != target.resource_id() ||
      manifest.revision() != target.revision()) {
    return Status::InvalidArgument(
        "target placement revision mismatch: stored " + manifest.resource_id() +
        "@" + manifest.revision() + ", target " + target.resource_id() + "@" +
        target.revision());
  }
  return ValidateRuntimeBindings(target, target_bindings,
                                 BindingCoverage::kSubset)
      .WithContext("target bindings");
}

}  // namespace

Result<LoadReport> WeightStore::Load(
    const StoredWeightManifest& manifest, const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) {
  RESHARD_RETURN_NOT_OK(CheckLoadIdentity(manifest, target, target_bindings));
  const internal::RevisionKeys keys(manifest.group_id());
  RESHARD_ASSIGN_OR_RETURN(Lease lease, Lease::Take(*backend_, keys, options_));
  // The revision must be the committed one (and still there, under lease).
  auto committed = ReadManifest(manifest.manifest_key());
  if (!committed.ok()) {
    return Status::FailedPrecondition("weight manifest is not committed: " +
                                      manifest.manifest_key());
  }
  if (committed->manifest_digest() != manifest.manifest_digest()) {
    return Status::FailedPrecondition(
        "committed weight manifest differs from load plan: " +
        manifest.manifest_key());
  }
  PlanOptions plan_options;
  if (target_bindings.size() == 1) {
    plan_options.target_participant_id = target_bindings[0].participant_id();
  }
  RESHARD_ASSIGN_OR_RETURN(auto plan, LogicalTransferPlan::MakeFromStored(
                                          manifest, target, plan_options));
  LoadReport report;
  LoadWorkBuilder work(manifest, target_bindings, &report);
  for (const TransferRegion& r : plan.regions()) {
    RESHARD_RETURN_NOT_OK(work.Add(plan, r));
  }
  // Rule 67: at least one operation.
  if (report.regions == 0) {
    return Status::InvalidArgument(
        "load plan has no operations: the target bindings bind no fragment "
        "of " +
        manifest.manifest_key() + "'s target placement");
  }
  Loader loader(*backend_, options_, &report);
  for (auto& [fid, per] : work.objects()) {
    const StoredFragment& s = *per.fragment;
    RESHARD_ASSIGN_OR_RETURN(auto sums,
                             internal::ReadChunkSums(*backend_, keys, s));
    std::sort(per.staged.begin(), per.staged.end(),
              [](const Work& a, const Work& b) {
                return a.object_base < b.object_base;
              });
    RESHARD_RETURN_NOT_OK(loader.Run(s.object_key, s.stored_fragment_id, sums,
                                     per.direct, per.staged));
  }
  return report;
}

}  // namespace reshard
