// CUDA fragments in store loads and uploads. The store reads and writes
// bytes on the host; a CUDA target is filled by loading into pinned host
// staging and copying host to device, and a CUDA source is uploaded from
// pinned staging it was copied into, both through the device-API seam
// (exec_cuda/fragment_staging.h). Where there is no CUDA executor (a build
// without CUDA, a machine without a device) the operation is refused
// before any byte or record is written, naming the first CUDA fragment.

#ifndef RESHARD_STORE_DEVICE_STAGING_H_
#define RESHARD_STORE_DEVICE_STAGING_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "exec_cuda/fragment_staging.h"
#include "reshard/weight_store.h"
#include "store/converting_load.h"

namespace reshard::internal {

// The device API a store operation over `bindings` stages through: null
// where no fragment of `bindings` is CUDA memory; `injected`, or the CUDA
// runtime's, where one is; else FailedPrecondition naming the first CUDA
// fragment and why, as the local path does: "store load executor cannot
// move cuda memory: target fragment w/tp0 of participant p0 (device
// \"cuda:1\"); CUDA executor unavailable: no CUDA device on this machine"
// (`path` "store load", `side` "target").
Result<std::shared_ptr<cuda::DeviceApi>> DeviceApiFor(
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    std::string_view path, std::string_view side,
    const std::shared_ptr<cuda::DeviceApi>& injected);

// Loads `target`'s bound fragments with `load` in groups of whole tensors
// whose CUDA fragments (the callers') fit `staging_budget` bytes of pinned
// host staging (a larger tensor is a group of its own): host fragments
// are loaded in place, CUDA ones into the staging, then copied host to
// device before the next group's staging is allocated. The report sums
// the groups'.
Result<LoadReport> LoadThroughDeviceStaging(
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    std::shared_ptr<cuda::DeviceApi> api, uint64_t staging_budget,
    const PartLoad& load);

// An upload's source bytes on the host: a host fragment's own memory, a
// CUDA fragment's copied into pinned staging (one fragment at a time, the
// buffer reused and grown to the largest). `api` null: host sources only.
class UploadStaging {
 public:
  explicit UploadStaging(std::shared_ptr<cuda::DeviceApi> api);
  ~UploadStaging();
  // The fragment's nbytes contiguous bytes, valid until the next call.
  Result<const uint8_t*> Host(const RuntimeBindingFragment& f);

 private:
  std::unique_ptr<cuda::FragmentStaging> staging_;
  std::unique_ptr<cuda::PinnedBuffer> buffer_;
};

}  // namespace reshard::internal

#endif  // RESHARD_STORE_DEVICE_STAGING_H_
