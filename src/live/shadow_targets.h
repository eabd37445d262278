// Internal to the live layer: ShadowTargets, a standing session's shadow
// buffers (LiveSessionOptions::shadow_targets). The plan writes a rank's
// targets into host buffers the session owns; only after a successful
// update's world barrier are they copied into the caller's (serving)
// targets, so a failed update leaves the serving weights untouched.
// Given a device API (UseDevice: an exchange that moves CUDA memory, see
// device_regions.h), a CUDA serving fragment's shadow is device memory of
// its device (DeviceApi::Malloc) and its flip a device-to-device copy.
#ifndef RESHARD_LIVE_SHADOW_TARGETS_H_
#define RESHARD_LIVE_SHADOW_TARGETS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec_cuda/device_api.h"
#include "exec_cuda/device_streams.h"
#include "reshard/binding.h"
#include "reshard/status.h"

namespace reshard::live_internal {

class ShadowTargets {
 public:
  // `session` names the session in errors.
  explicit ShadowTargets(std::string session) : session_(std::move(session)) {}
  ~ShadowTargets();

  ShadowTargets(const ShadowTargets&) = delete;
  ShadowTargets& operator=(const ShadowTargets&) = delete;

  // CUDA serving fragments shadowed from now on get device shadows
  // through `api`.
  void UseDevice(std::shared_ptr<cuda::DeviceApi> api) {
    api_ = std::move(api);
    streams_ = std::make_unique<cuda::DeviceStreams>(api_);
  }

  // Whether Shadow was called: the plan writes shadows, not the serving
  // targets.
  bool active() const { return !serving_.empty(); }

  // Takes `serving` as the caller's targets and returns copies of them
  // that point at this rank's shadow buffers (one per placement fragment,
  // allocated once; fragments sharing a serving range, declared aliases,
  // share a shadow), remembering the copies of the flip.
  Result<std::vector<WeightRuntimeBindingManifest>> Shadow(
      const std::vector<WeightRuntimeBindingManifest>& serving);

  // `targets` are still the serving bindings the shadows were made for:
  // FailedPrecondition naming the first participant that changed.
  Status SameServing(
      const std::vector<WeightRuntimeBindingManifest>& targets) const;

  // After the world barrier of a successful update: copies every shadow
  // into its serving range, and the update becomes visible (the device
  // copies waited for).
  Status Flip();

 private:
  // One serving <- shadow copy of the flip.
  struct ShadowCopy {
    uint8_t* serving;
    const uint8_t* shadow;
    uint64_t bytes;
    int device;  // of a device shadow; -1: host memory
  };

  // The shadow of `f` (allocated once per placement fragment).
  Result<uint8_t*> ShadowBuffer(const RuntimeBindingFragment& f, int* device);

  // A copy of `b` whose fragments point at their shadows.
  Result<WeightRuntimeBindingManifest> ShadowOf(
      const WeightRuntimeBindingManifest& b,
      std::map<std::pair<uint64_t, uint64_t>, uint8_t*>& by_range);

  std::string session_;
  std::vector<WeightRuntimeBindingManifest> serving_;
  // The shadows by placement fragment id.
  std::map<std::string, std::unique_ptr<uint8_t[]>> shadows_;
  std::vector<ShadowCopy> flips_;
  // Device shadows (UseDevice): the API, the buffers by placement fragment
  // id, a stream per device for the flip.
  std::shared_ptr<cuda::DeviceApi> api_;
  std::map<std::string, std::pair<uint8_t*, int>> device_shadows_;
  std::unique_ptr<cuda::DeviceStreams> streams_;
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_SHADOW_TARGETS_H_
