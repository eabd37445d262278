// Internal to the live layer: DeviceMirrors, the pinned host mirrors of a
// rank's CUDA fragments for an exchange that moves host memory only
// (LiveSessionOptions::device_staging_bytes). The rank binds the plan to
// the mirrors, so the exchange and the verification only ever see host
// memory; the CUDA sources are copied device to host into their mirrors
// before each update, and the target mirrors host to device only after a
// successful one, so a failed update leaves CUDA targets untouched.
#ifndef RESHARD_LIVE_DEVICE_MIRRORS_H_
#define RESHARD_LIVE_DEVICE_MIRRORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "exec_cuda/fragment_staging.h"
#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard::live_internal {

// Whether a fragment of `bindings` is CUDA memory.
bool HasCudaFragment(const std::vector<WeightRuntimeBindingManifest>& bindings);

// Refuses, naming the first CUDA fragment of `bindings` (side "source" or
// "target"), memory that exchange `exchange` would move on the device
// directly (DeviceRegions, device_regions.h) but that part of the
// session's own work on it cannot reach: `reason` says which work and why
// ("delta updates (delta) snapshot, encode and apply on the host"). OK
// where there is none.
Status RefuseDirectDeviceMemory(
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    std::string_view side, const std::string& session,
    const std::string& exchange, std::string_view reason);

class DeviceMirrors {
 public:
  // `session` names the session in errors; `budget` bounds the mirrors'
  // bytes in all.
  DeviceMirrors(std::string session, std::shared_ptr<cuda::DeviceApi> api,
                uint64_t budget)
      : session_(std::move(session)),
        staging_(std::move(api)),
        budget_(budget) {}

  DeviceMirrors(const DeviceMirrors&) = delete;
  DeviceMirrors& operator=(const DeviceMirrors&) = delete;

  // `bindings` of `placement` (`side` "source" or "target") with every
  // CUDA fragment replaced by a contiguous host fragment over its mirror,
  // one per (side, participant, placement fragment), allocated the first
  // time it is seen; the host fragments as they are.
  //   adopt: the CUDA fragments become the ones the mirrors copy from or
  //     into (a moved device buffer keeps its mirror, so the plan's
  //     bindings stay as they were); a new mirror past the budget is
  //     refused with FailedPrecondition naming it. A new target mirror
  //     starts as a copy of its device fragment.
  //   !adopt (the fence's current bindings): a CUDA fragment is replaced
  //     only when it is the one its mirror copies, else left as it is
  //     (the fence then finds it moved).
  Result<std::vector<WeightRuntimeBindingManifest>> Mirror(
      const std::vector<WeightRuntimeBindingManifest>& bindings,
      const WeightPlacementManifest& placement, std::string_view side,
      bool adopt);

  // Device to host: every CUDA source into its mirror.
  Status SourcesToHost();
  // Host to device: every target mirror into its CUDA fragment.
  Status TargetsToDevice();

  // The mirrors' bytes in all.
  uint64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    RuntimeBindingFragment device;  // the caller's, as last adopted
    RuntimeBindingFragment host;    // over `buffer`
    cuda::PinnedBuffer buffer;
  };
  using Key = std::tuple<std::string, std::string, std::string>;

  // The mirror of `f` (made when `adopt` and missing); null when there is
  // none and `adopt` is false.
  Result<Entry*> EntryOf(const Key& key, const RuntimeBindingFragment& f,
                         std::string_view side, std::string_view participant,
                         bool adopt);

  std::string session_;
  cuda::FragmentStaging staging_;
  uint64_t budget_;
  uint64_t bytes_ = 0;
  std::map<Key, Entry> entries_;
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_DEVICE_MIRRORS_H_
