// LiveRank (live_rank.h) over an exchange that moves CUDA memory itself,
// or over a host-only one wrapped in the staged pipeline
// (staged_exchange.h; LiveSessionOptions::device_staging): the CUDA
// fragments stay as bound (no mirrors) and this rank's own work on them
// runs through DeviceRegions (device_regions.h).
#include "bind/binding_copy.h"
#include "bind/row_walker.h"
#include "exec_cuda/fragment_staging.h"
#include "live/live_rank.h"
#include "live/staged_exchange.h"

namespace reshard::live_internal {

Status LiveRank::DirectDevice(const LiveBindings& b) {
  const std::string& session = options_.session;
  const std::string& exchange = options_.exchange;
  // Refused on every rank that holds such a fragment, at open or at the
  // update that binds it, before any byte moves.
  if (options_.delta) {
    constexpr std::string_view kDelta =
        "delta updates (delta) snapshot, encode and apply a rank's bytes on "
        "the host";
    RESHARD_RETURN_NOT_OK(RefuseDirectDeviceMemory(b.sources, "source", session,
                                                   exchange, kDelta));
    RESHARD_RETURN_NOT_OK(RefuseDirectDeviceMemory(b.targets, "target", session,
                                                   exchange, kDelta));
  }
  if (device_) return Status::OK();
  Result<std::shared_ptr<cuda::DeviceApi>> api =
      cuda::StagingDeviceApi(options_.device_api);
  if (!api.ok()) {
    return api.status().WithContext("live session " + session +
                                    ": CUDA fragments over exchange \"" +
                                    exchange + "\"");
  }
  device_ = std::make_unique<DeviceRegions>(
      session, std::move(api).ValueOrDie(), options_.device_staging_bytes);
  // Shadows of CUDA targets are device memory, flipped on the device.
  shadow_.UseDevice(device_->api());
  return Status::OK();
}

Status LiveRank::CopyLocal() {
  std::vector<const BoundRegion*> on_device;
  for (const BoundRegion* br : local_) {
    if (device_ && device_->OnDevice(*br)) {
      on_device.push_back(br);
      continue;
    }
    internal::CopyRegionSegments(*br, 0, internal::RowCount(*br));
    if (verify_) verify_->Copied(*br);
    report_.bytes_received += br->bytes;
  }
  if (on_device.empty()) return Status::OK();
  // Queued on the device's streams and waited for; hashed after.
  RESHARD_RETURN_NOT_OK(device_->Copy(on_device));
  for (const BoundRegion* br : on_device) {
    if (verify_) verify_->Copied(*br);
    report_.bytes_received += br->bytes;
  }
  return Status::OK();
}

bool LiveRank::PipelineStaging() const {
  if (staged_exchange_) return true;
  if (options_.device_staging != DeviceStaging::kPipeline || options_.delta ||
      exchange_ == nullptr) {
    return false;
  }
  const PeerExchangeCapabilities caps = exchange_->capabilities();
  if (std::find(caps.memory_kinds.begin(), caps.memory_kinds.end(),
                MemoryKind::kCuda) != caps.memory_kinds.end()) {
    return false;  // the exchange moves CUDA memory itself
  }
  // Not where the caller asked for pulls; under auto, a session whose
  // published bindings hold a CUDA fragment pushes (PlanAndBind), so that
  // the pipeline takes them wherever the ranks run.
  return options_.protocol != LiveProtocol::kPull;
}

namespace {

// Placement fragment ids of `side`'s CUDA fragments.
std::set<std::string> CudaFragments(
    const std::vector<WeightRuntimeBindingManifest>& side) {
  std::set<std::string> ids;
  for (const WeightRuntimeBindingManifest& b : side) {
    for (const RuntimeBindingFragment& f : b.fragments()) {
      auto kind = MemoryKindOfDevice(f.device());
      if (kind.ok() && *kind == MemoryKind::kCuda) {
        ids.insert(f.placement_fragment_id());
      }
    }
  }
  return ids;
}

}  // namespace

Status LiveRank::RequireStagingExecutor(const LiveBindings& b) const {
  if (cuda::StagingDeviceApi(options_.device_api).ok()) return Status::OK();
  const std::vector<MemoryKind> host = {MemoryKind::kHost};
  for (const auto* side : {&b.sources, &b.targets}) {
    const char* name = side == &b.sources ? "source" : "target";
    for (const WeightRuntimeBindingManifest& binding : *side) {
      for (const RuntimeBindingFragment& f : binding.fragments()) {
        RESHARD_RETURN_NOT_OK(RequireMemoryKind(
            f, host, options_.exchange, name, binding.participant_id()));
      }
    }
  }
  return Status::OK();
}

Status LiveRank::StageDeviceRegions() {
  if (!PipelineStaging()) return Status::OK();
  const std::set<std::string> sources = CudaFragments(world_.sources);
  const std::set<std::string> targets = CudaFragments(world_.targets);
  std::vector<uint8_t> staged(plan_->regions().size(), 0);
  bool any = false;
  for (size_t k = 0; k < staged.size(); ++k) {
    const TransferRegion& r = plan_->regions()[k];
    const std::string_view s =
        plan_->source_fragments()[r.source_fragment].fragment_id;
    const std::string_view t =
        plan_->target_fragments()[r.target_fragment].fragment_id;
    staged[k] =
        sources.count(std::string(s)) > 0 || targets.count(std::string(t)) > 0;
    any = any || staged[k] != 0;
  }
  staged_regions_ = std::move(staged);
  if (!any || staged_exchange_) return Status::OK();
  if (Status st = CheckStagedBudget(options_.device_staging_bytes); !st.ok()) {
    return st.WithContext("live session " + options_.session);
  }
  // Every rank wraps (the same world): a rank without a CUDA executor,
  // whose sides are all host memory, stages through host memory.
  Result<std::shared_ptr<cuda::DeviceApi>> api =
      cuda::StagingDeviceApi(options_.device_api);
  StagedExchangeOptions so;
  so.budget = options_.device_staging_bytes;
  so.staged = [this](uint32_t region) {
    return region < staged_regions_.size() && staged_regions_[region] != 0;
  };
  Result<std::unique_ptr<PeerExchange>> wrapped = MakeStagedExchange(
      std::move(exchange_), api.ok() ? *api : nullptr, std::move(so));
  if (!wrapped.ok()) {
    return wrapped.status().WithContext("live session " + options_.session);
  }
  exchange_ = std::move(wrapped).ValueOrDie();
  staged_exchange_ = true;
  return Status::OK();
}

}  // namespace reshard::live_internal
