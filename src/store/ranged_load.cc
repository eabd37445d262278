// RangedLoad: the store-to-runtime loader shared by WeightStore::Load and
// checkpoint loads (see ranged_load.h for the read strategy).

#include "store/ranged_load.h"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "bind/strided_stream.h"
#include "reshard/plan.h"
#include "store/object_loader.h"
#include "store/progress.h"

namespace reshard::internal {
namespace {

using object_load::Loader;
using object_load::Work;

// The load's target memory, by placement fragment id.
struct BoundTarget {
  const RuntimeBindingFragment* fragment;
  const WeightRuntimeBindingManifest* binding;
};

// The regions of one stored fragment (one object range), split into
// direct and staged work.
struct PerObject {
  const StoredFragment* fragment = nullptr;
  std::vector<Work> direct, staged;
};

// Turns the plan's regions into work per stored fragment, after checking
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
    return AddAt(plan, r, t->second.fragment->address() + r.target_base_offset,
                 /*staged_only=*/false);
  }

  // Region `r` with its target's first byte at `target_base`; every
  // region is staged for a sink (nothing is read into its positions).
  Status AddAt(const LogicalTransferPlan& plan, const TransferRegion& r,
               uint64_t target_base, bool staged_only) {
    const PlanFragment& sf = plan.source_fragments()[r.source_fragment];
    auto sit = stored_.find(sf.fragment_id);
    if (sit == stored_.end()) {
      return Status::Internal("load plan sources and manifest differ: " +
                              std::string(sf.fragment_id));
    }
    const StoredFragment* s = sit->second;
    BoundRegion br;
    br.inner_bytes = r.inner_bytes;
    br.loops = r.loops;
    br.bytes = r.bytes;
    Work w;
    w.object_base = s->object_offset + r.source_base_offset;
    w.source = StridedSide::Source(br);
    w.target = StridedSide::Target(br);
    w.target_base = target_base;
    w.rows = r.inner_bytes == 0 ? 0 : r.bytes / r.inner_bytes;
    auto& per = objects_[s->stored_fragment_id];
    per.fragment = s;
    const bool direct =
        !staged_only && w.source.contiguous() && w.target.contiguous();
    (direct ? per.direct : per.staged).push_back(std::move(w));
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
                                        std::string(tf.fragment_id));
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

// Serves every stored fragment's work in object order.
Status Execute(ObjectStore& backend, const RangedLoadOptions& options,
               LoadWorkBuilder& work, RangedSink* sink, LoadReport* report) {
  // Fragments in object order: a file holding many fragments (a
  // checkpoint) is read front to back.
  std::vector<PerObject*> order;
  for (auto& [fid, per] : work.objects()) order.push_back(&per);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return std::tie(a->fragment->object_key, a->fragment->object_offset) <
           std::tie(b->fragment->object_key, b->fragment->object_offset);
  });
  Loader loader(backend, options, report, sink);
  ProgressMeter progress(options.progress, report->bytes);
  for (PerObject* p : order) {
    uint64_t bytes = 0;
    for (const Work& w : p->direct) bytes += w.source.total_bytes;
    for (const Work& w : p->staged) bytes += w.source.total_bytes;
    const StoredFragment& s = *p->fragment;
    ChunkSums sums;
    const bool verified = static_cast<bool>(options.chunk_sums);
    if (verified) {
      RESHARD_ASSIGN_OR_RETURN(sums, options.chunk_sums(s));
    } else {
      sums.chunk_bytes = 1;
      sums.size = s.object_offset + s.nbytes;
    }
    RESHARD_RETURN_NOT_OK(loader.Run(s, sums, verified, p->direct, p->staged));
    progress.Add(bytes);
  }
  progress.Finish();
  report->staging_bytes = loader.staging_bytes();
  return Status::OK();
}

}  // namespace

Result<LoadReport> RangedLoad(
    ObjectStore& backend, const StoredWeightManifest& manifest,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    const RangedLoadOptions& options) {
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
  RESHARD_RETURN_NOT_OK(Execute(backend, options, work, nullptr, &report));
  return report;
}

Result<LoadReport> RangedLoadToSink(
    ObjectStore& backend, const StoredWeightManifest& manifest,
    const LogicalTransferPlan& plan,
    const std::function<uint64_t(const TransferRegion&)>& target_position,
    RangedSink& sink, const RangedLoadOptions& options) {
  LoadReport report;
  LoadWorkBuilder work(manifest, {}, &report);
  for (const TransferRegion& r : plan.regions()) {
    RESHARD_RETURN_NOT_OK(
        work.AddAt(plan, r, target_position(r), /*staged_only=*/true));
  }
  RESHARD_RETURN_NOT_OK(Execute(backend, options, work, &sink, &report));
  return report;
}

}  // namespace reshard::internal
