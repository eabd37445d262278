// Internal to the live layer: DeviceRegions, a rank's own work on regions
// whose bytes lie in CUDA device memory, for an exchange that moves device
// memory itself (PeerExchangeCapabilities::memory_kinds holds kCuda:
// "cuda-ipc", "nccl" with the NCCL library). The bound plan keeps the CUDA
// addresses there (no host mirrors, device_mirrors.h), so the session's
// own reads and writes of a rank's bytes go through the device API:
//  - same-rank copies (both ends on this rank, either side or both in
//    device memory) are lowered as the CUDA executor lowers a region
//    (copy_lowering.h: 2D/3D asynchronous copies, the gather/scatter
//    kernel where both sides are device memory and no few copies express
//    the strides), queued on a stream per device and waited for before
//    Copy returns;
//  - a region side in device memory is hashed (verification, live_verify.h)
//    by copying its bytes device to host, in stream order, through one
//    pinned staging buffer of at most LiveSessionOptions::
//    device_staging_bytes, and hashing them there: the same XXH3-64 as
//    HashRegion over host memory, so a peer with host memory agrees byte
//    for byte. The cost is one extra device-to-host read of every verified
//    device byte (a device hash kernel would avoid it; not built);
//  - the fault injection of verification flips a target's first byte
//    through the same staging.
// Which sides are device memory is asked of the device API
// (DeviceApi::Pointer) once per bound plan (Classify).
#ifndef RESHARD_LIVE_DEVICE_REGIONS_H_
#define RESHARD_LIVE_DEVICE_REGIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec_cuda/device_api.h"
#include "exec_cuda/device_streams.h"
#include "exec_cuda/fragment_staging.h"
#include "live/region_hash.h"
#include "reshard/bound_plan.h"
#include "reshard/status.h"

namespace reshard::live_internal {

// `side` of `region` as the source of a region of its own (the target
// side left for the caller to place): what staging reads a side through.
BoundRegion SideAsSource(const BoundRegion& region, RegionSide side);

// `piece` with its target packed contiguously at `address` (row by row,
// in stream order).
BoundRegion PackedAt(BoundRegion piece, uint64_t address);

class DeviceRegions {
 public:
  // `session` names the session in errors; `staging_bytes` bounds the
  // pinned staging buffer of the hashes (at least 1).
  DeviceRegions(std::string session, std::shared_ptr<cuda::DeviceApi> api,
                uint64_t staging_bytes);
  ~DeviceRegions();

  DeviceRegions(const DeviceRegions&) = delete;
  DeviceRegions& operator=(const DeviceRegions&) = delete;

  const std::shared_ptr<cuda::DeviceApi>& api() const { return api_; }

  // Records which side of each of `regions` (a bound plan's) lies in
  // device memory (after every bind and rebind, before any other call
  // uses them).
  Status Classify(const std::vector<BoundRegion>& regions);

  // Whether `side` of `region` (or either side) is device memory, as of
  // the last Classify.
  bool OnDevice(const BoundRegion& region, RegionSide side) const;
  bool OnDevice(const BoundRegion& region) const;

  // Copies every region of `regions` from its source into its target on
  // the device (queued on the target's device's stream, else the
  // source's), and waits for all of them.
  Status Copy(const std::vector<const BoundRegion*>& regions);

  // XXH3-64 of `side` of `region` (device memory) read through the staging
  // buffer; HashRegion's value for the same bytes. Thread-safe (one
  // staging at a time).
  Result<uint64_t> Hash(const BoundRegion& region, RegionSide side);

  // Flips the first byte of `region`'s target (device memory) by XOR with
  // `mask` (verification's fault injection).
  Status FlipFirstTargetByte(const BoundRegion& region, uint8_t mask);

  // Bytes read device to host for hashes so far, and the staging buffer's
  // size (0 until the first hash).
  uint64_t staged_bytes() const;
  uint64_t staging_buffer_bytes() const;

 private:
  Result<cuda::StreamHandle> StreamOf(int device);
  Result<int> DeviceOf(uint64_t address);
  // Queues `region` (a piece of a side, packed into the staging buffer at
  // `offset`) device to host.
  Status QueueRead(const BoundRegion& piece, uint64_t offset,
                   cuda::StreamHandle stream);

  std::string session_;
  std::shared_ptr<cuda::DeviceApi> api_;
  uint64_t staging_limit_;
  // Bit 0: the source is device memory; bit 1: the target. By region index.
  std::vector<uint8_t> sides_;
  mutable std::mutex mu_;  // the staging buffer, the streams, the counters
  cuda::DeviceStreams streams_{api_};
  std::unique_ptr<cuda::PinnedBuffer> staging_;
  void* state_ = nullptr;  // XXH3_state_t
  uint64_t staged_ = 0;
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_DEVICE_REGIONS_H_
