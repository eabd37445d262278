#include "api/convert_reshard.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include "api/device_conversion.h"
#include "bind/apply_conversion.h"
#include "bind/binding_copy.h"
#include "exec_cuda/fragment_staging.h"
#include "reshard/bound_plan.h"
#include "util/host_memory.h"

namespace reshard::internal {
namespace {

using Clock = std::chrono::steady_clock;

// Target buffers by placement fragment id (all, those in host memory, and
// those in CUDA memory), each participant's binding, and the device of the
// participants whose targets are CUDA memory ("cuda:1").
struct TargetMemory {
  std::unordered_map<std::string, void*> by_fragment;
  std::unordered_map<std::string, void*> on_host;
  std::unordered_map<std::string, void*> on_device;
  std::map<std::string, const WeightRuntimeBindingManifest*, std::less<>>
      by_participant;
  std::map<std::string, std::string, std::less<>> cuda_device;
};

bool IsCuda(const RuntimeBindingFragment& f) {
  const auto kind = MemoryKindOfDevice(f.device());
  return kind.ok() && *kind == MemoryKind::kCuda;
}

// A CUDA target fragment `f` of `b`: contiguous, and every fragment of its
// participant on the same device (the staging binding has one device).
Status CheckCudaTarget(const RuntimeBindingFragment& f,
                       const WeightRuntimeBindingManifest& b) {
  const auto canonical = CanonicalStrides(f.local_shape(), f.itemsize());
  if (!canonical.has_value() || *canonical != f.strides_bytes()) {
    return Status::Unimplemented(
        "a converting reshard into CUDA memory needs contiguous fragments: "
        "target fragment " +
        f.placement_fragment_id() + " of " + b.participant_id());
  }
  for (const RuntimeBindingFragment& other : b.fragments()) {
    if (other.device() != f.device()) {
      return Status::Unimplemented(
          "a converting reshard into CUDA memory needs every target fragment "
          "of a participant on one device: target fragment " +
          other.placement_fragment_id() + " of " + b.participant_id() +
          " is on " + other.device() + ", " + f.placement_fragment_id() +
          " on " + f.device());
    }
  }
  return Status::OK();
}

// `allow_cuda`: CUDA targets are taken (the device path); else every
// target must be contiguous host memory.
Result<TargetMemory> TargetBuffers(
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    bool allow_cuda = false) {
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
      void* at = reinterpret_cast<void*>(f.address());
      out.by_fragment[f.placement_fragment_id()] = at;
      if (allow_cuda && IsCuda(f)) {
        RESHARD_RETURN_NOT_OK(CheckCudaTarget(f, b));
        out.on_device[f.placement_fragment_id()] = at;
        out.cuda_device[b.participant_id()] = f.device();
        continue;
      }
      RESHARD_RETURN_NOT_OK(RequireContiguousHost(
          f, "a converting reshard", "target", b.participant_id()));
      out.on_host[f.placement_fragment_id()] = at;
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

// The ordinal of a CUDA device string ("cuda" is device 0).
int OrdinalOf(std::string_view device) {
  const size_t colon = device.find(':');
  return colon == std::string_view::npos
             ? 0
             : std::atoi(std::string(device.substr(colon + 1)).c_str());
}

// The staging of a participant whose targets are CUDA memory is device
// memory of that device, allocated (and owned) by `device`.
Result<Staging> StagingBuffers(const ConversionPlan& conversion,
                               const TargetMemory& memory,
                               DeviceConverter* device = nullptr) {
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
      auto on = memory.cuda_device.find(part.participant_id());
      if (device != nullptr && on != memory.cuda_device.end()) {
        RESHARD_ASSIGN_OR_RETURN(
            out.by_fragment[id],
            device->Allocate(OrdinalOf(on->second), f.nbytes()));
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
    auto on = memory.cuda_device.find(participant);
    if (on != memory.cuda_device.end()) o.device = on->second;
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
namespace {

// The first target fragment in CUDA memory, and its participant; null
// where every target is host memory.
std::pair<const RuntimeBindingFragment*, const std::string*> FirstCudaTarget(
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  for (const WeightRuntimeBindingManifest& b : bindings) {
    for (const RuntimeBindingFragment& f : b.fragments()) {
      if (IsCuda(f)) return {&f, &b.participant_id()};
    }
  }
  return {nullptr, nullptr};
}

// The device path: staging on the targets' devices, the bytes moved there
// by `transport`, the kernels converting into the device targets; host
// targets (participants of host memory) still convert on the CPU.
Result<ReshardReport> ReshardIntoDevices(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const CheckedBindings& source_bindings,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    std::shared_ptr<cuda::DeviceApi> api, Transport& transport,
    const ReshardOptions& options) {
  const ConversionPlan& conversion = *plan.conversion();
  DeviceConverter converter(std::move(api));
  RESHARD_ASSIGN_OR_RETURN(
      TargetMemory memory,
      TargetBuffers(conversion.target(), target_bindings, true));
  RESHARD_ASSIGN_OR_RETURN(Staging staging,
                           StagingBuffers(conversion, memory, &converter));
  RESHARD_ASSIGN_OR_RETURN(CheckedBindings bound,
                           BindStaging(conversion, memory, staging));
  RESHARD_ASSIGN_OR_RETURN(
      ReshardReport report,
      Reshard(plan, source, source_bindings, conversion.staging(), bound,
              transport, options));
  const auto start = Clock::now();
  const FragmentMemory staging_of = FragmentMemoryIn(staging.by_fragment);
  RESHARD_RETURN_NOT_OK(
      ApplyConversions(conversion, staging_of, FragmentMemoryIn(memory.on_host),
                       std::max<uint32_t>(1, options.threads)));
  RESHARD_RETURN_NOT_OK(converter.Apply(conversion, staging_of,
                                        FragmentMemoryIn(memory.on_device)));
  report.transfer_seconds +=
      std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace

Result<ReshardReport> ReshardConverting(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const CheckedBindings& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    Transport& transport, const ReshardOptions& options,
    std::shared_ptr<cuda::DeviceApi> device_api) {
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
  const auto [on_cuda, participant] = FirstCudaTarget(target_bindings);
  if (on_cuda != nullptr) {
    Result<std::shared_ptr<cuda::DeviceApi>> api =
        cuda::StagingDeviceApi(std::move(device_api));
    if (!api.ok()) {
      return Status::FailedPrecondition(
          "a converting reshard into CUDA memory needs the CUDA executor: "
          "target fragment " +
          on_cuda->placement_fragment_id() + " of participant " + *participant +
          " (device \"" + on_cuda->device() + "\"); " + api.status().message());
    }
    return ReshardIntoDevices(plan, source, source_bindings, target_bindings,
                              std::move(*api), transport, options);
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
