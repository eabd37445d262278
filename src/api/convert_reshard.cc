#include "api/convert_reshard.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "bind/apply_conversion.h"
#include "bind/binding_copy.h"
#include "reshard/bound_plan.h"
#include "util/host_memory.h"

namespace reshard::internal {
namespace {

using Clock = std::chrono::steady_clock;

// Target buffers by placement fragment id, and each participant's binding.
struct TargetMemory {
  std::unordered_map<std::string, void*> by_fragment;
  std::map<std::string, const WeightRuntimeBindingManifest*, std::less<>>
      by_participant;
};

Result<TargetMemory> TargetBuffers(
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  TargetMemory out;
  for (const WeightRuntimeBindingManifest& b : bindings) {
    if (b.placement_id() != target.placement_id()) {
      return Status::InvalidArgument("target bindings: binding of " +
                                     b.participant_id() + " is for placement " +
                                     b.placement_id() + ", not " +
                                     target.placement_id());
    }
    out.by_participant[b.participant_id()] = &b;
    for (const RuntimeBindingFragment& f : b.fragments()) {
      RESHARD_RETURN_NOT_OK(RequireContiguousHost(
          f, "a converting reshard", "target", b.participant_id()));
      out.by_fragment[f.placement_fragment_id()] =
          reinterpret_cast<void*>(f.address());
    }
  }
  return out;
}

// Staging buffers of the converting fragments; the rest of the staging
// placement lives in the target buffers.
struct Staging {
  std::unordered_map<std::string, void*> by_fragment;
  std::vector<HostBuffer> owned;
  uint64_t bytes = 0;
};

Result<Staging> StagingBuffers(const ConversionPlan& conversion,
                               const TargetMemory& memory) {
  Staging out;
  std::unordered_map<std::string_view, std::string_view> target_of;
  for (const auto* f : conversion.target().fragments()) {
    const std::string& s =
        conversion.StagingFragmentOf(f->placement_fragment_id());
    if (!s.empty() && conversion.Find(f->tensor_id()) == nullptr) {
      target_of[s] = f->placement_fragment_id();
    }
  }
  for (const WeightPlacementPart& part : conversion.staging().parts()) {
    // Only the participants bound here.
    if (memory.by_participant.count(part.participant_id()) == 0) continue;
    for (const PlacementFragment& f : part.fragments()) {
      const std::string& id = f.placement_fragment_id();
      auto t = target_of.find(id);
      if (t != target_of.end()) {
        auto m = memory.by_fragment.find(std::string(t->second));
        if (m != memory.by_fragment.end()) out.by_fragment[id] = m->second;
        continue;
      }
      // Huge pages when large: the fill faults them in 2 MiB at a time.
      out.owned.push_back(AllocateHostBytes(f.nbytes()));
      if (out.owned.back() == nullptr) {
        return Status::ResourceExhausted(
            "cannot allocate " + std::to_string(f.nbytes()) +
            " staging bytes for fragment " + id + " of " + f.tensor_id());
      }
      out.bytes += f.nbytes();
      out.by_fragment[id] = out.owned.back().get();
    }
  }
  return out;
}

// Each participant's staging bound and checked once, as one set.
Result<CheckedBindings> BindStaging(const ConversionPlan& conversion,
                                    const TargetMemory& memory,
                                    const Staging& staging) {
  std::vector<CheckedBindings> out;
  for (const auto& [participant, binding] : memory.by_participant) {
    BufferBindingOptions o;
    o.instance_id = binding->instance_id();
    o.generation = binding->generation();
    o.lease_id = binding->lease_id();
    RESHARD_ASSIGN_OR_RETURN(
        auto b, BindCheckedBuffers(
                    conversion.staging(), participant,
                    [&](std::string_view id) -> void* {
                      auto it = staging.by_fragment.find(std::string(id));
                      return it == staging.by_fragment.end() ? nullptr
                                                             : it->second;
                    },
                    o));
    out.push_back(std::move(b));
  }
  return CheckedBindings::Merge(conversion.staging(), out,
                                BindingCoverage::kSubset);
}

}  // namespace

}  // namespace reshard::internal

namespace reshard {

struct ConversionStaging::Impl {
  const ConversionPlan* plan;
  internal::TargetMemory memory;
  internal::Staging staging;
  std::optional<CheckedBindings> bindings;
};

ConversionStaging::ConversionStaging(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
ConversionStaging::ConversionStaging(ConversionStaging&&) noexcept = default;
ConversionStaging& ConversionStaging::operator=(ConversionStaging&&) noexcept =
    default;
ConversionStaging::~ConversionStaging() = default;

Result<ConversionStaging> ConversionStaging::Make(
    const ConversionPlan& plan,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) {
  auto impl = std::make_unique<Impl>();
  impl->plan = &plan;
  RESHARD_ASSIGN_OR_RETURN(
      impl->memory, internal::TargetBuffers(plan.target(), target_bindings));
  RESHARD_ASSIGN_OR_RETURN(impl->staging,
                           internal::StagingBuffers(plan, impl->memory));
  RESHARD_ASSIGN_OR_RETURN(
      impl->bindings, internal::BindStaging(plan, impl->memory, impl->staging));

  return ConversionStaging(std::move(impl));
}

const std::vector<WeightRuntimeBindingManifest>& ConversionStaging::bindings()
    const {
  return impl_->bindings->bindings();
}

const CheckedBindings& ConversionStaging::checked_bindings() const {
  return *impl_->bindings;
}

uint64_t ConversionStaging::staging_bytes() const {
  return impl_->staging.bytes;
}

Status ConversionStaging::Apply(uint32_t threads) const {
  return internal::ApplyConversions(
      *impl_->plan, internal::FragmentMemoryIn(impl_->staging.by_fragment),
      internal::FragmentMemoryIn(impl_->memory.by_fragment),
      std::max<uint32_t>(1, threads));
}

}  // namespace reshard

namespace reshard::internal {

Result<ReshardReport> ReshardConverting(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const CheckedBindings& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    Transport& transport, const ReshardOptions& options) {
  const ConversionPlan& conversion = *plan.conversion();
  if (options.current_bindings) {
    return Status::Unimplemented(
        "ReshardOptions::current_bindings: the fence of a converting reshard "
        "is not supported yet");
  }
  if (conversion.target().placement_id() != target.placement_id()) {
    return Status::InvalidArgument(
        "logical plan and target placement IDs differ");
  }
  RESHARD_ASSIGN_OR_RETURN(
      auto staging, ConversionStaging::Make(conversion, target_bindings));
  // Into the staging placement: Reshard's ordinary path, since its
  // placement is the one the plan targets.
  RESHARD_ASSIGN_OR_RETURN(
      ReshardReport report,
      Reshard(plan, source, source_bindings, conversion.staging(),
              staging.checked_bindings(), transport, options));
  const auto start = Clock::now();
  RESHARD_RETURN_NOT_OK(staging.Apply(options.threads));
  report.transfer_seconds +=
      std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace reshard::internal
