// LiveRank (live_rank.h) over an exchange that moves CUDA memory itself:
// the CUDA fragments stay as bound (no mirrors) and this rank's own work
// on them runs through DeviceRegions (device_regions.h).
#include "bind/binding_copy.h"
#include "bind/row_walker.h"
#include "exec_cuda/fragment_staging.h"
#include "live/live_rank.h"

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

}  // namespace reshard::live_internal
