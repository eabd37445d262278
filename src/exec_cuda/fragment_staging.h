// Staging between CUDA device memory and pinned host memory, for the paths
// that read or write bytes on the host (store loads and uploads): a bound
// fragment's bytes copied into or out of a contiguous host buffer through
// the device-API seam, each fragment's copies lowered as the CUDA executor
// lowers a region (copy_lowering.h), on a stream per device, waited for
// before the call returns.
#ifndef RESHARD_EXEC_CUDA_FRAGMENT_STAGING_H_
#define RESHARD_EXEC_CUDA_FRAGMENT_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "exec_cuda/device_api.h"
#include "exec_cuda/device_streams.h"
#include "reshard/binding.h"

namespace reshard::cuda {

// The device API staging goes through: `injected` where given (tests pass
// the host emulation, as MakeTransportOver takes it); else the CUDA
// runtime's where this build has it and the machine a device; else
// FailedPrecondition with the reason MakeCudaTransport gives ("CUDA
// executor unavailable: no CUDA device on this machine").
Result<std::shared_ptr<DeviceApi>> StagingDeviceApi(
    std::shared_ptr<DeviceApi> injected);

// A binding of `f`'s elements contiguous in host memory at `address`
// (its nbytes bytes, row-major, device "cpu"): what a staged or mirrored
// fragment is bound as in place of the device memory.
Result<RuntimeBindingFragment> HostStagingFragment(
    const RuntimeBindingFragment& f, uint8_t* address);

// Page-locked host memory (DeviceApi::MallocHost), freed when destroyed.
class PinnedBuffer {
 public:
  static Result<PinnedBuffer> Make(std::shared_ptr<DeviceApi> api,
                                   size_t bytes);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  ~PinnedBuffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  PinnedBuffer(std::shared_ptr<DeviceApi> api, uint8_t* data, size_t size)
      : api_(std::move(api)), data_(data), size_(size) {}
  void Release();
  std::shared_ptr<DeviceApi> api_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Copies between fragments in device memory and contiguous host buffers
// holding the fragment's elements in row-major order (its nbytes bytes).
// Not thread-safe; streams are made on first use and destroyed with it.
class FragmentStaging {
 public:
  explicit FragmentStaging(std::shared_ptr<DeviceApi> api)
      : api_(std::move(api)) {}
  ~FragmentStaging();
  FragmentStaging(const FragmentStaging&) = delete;
  FragmentStaging& operator=(const FragmentStaging&) = delete;

  const std::shared_ptr<DeviceApi>& api() const { return api_; }

  // Host to device: `host` into the memory `fragment` views.
  Status ToFragment(const uint8_t* host,
                    const RuntimeBindingFragment& fragment);
  // Device to host: the memory `fragment` views into `host`.
  Status FromFragment(const RuntimeBindingFragment& fragment, uint8_t* host);

 private:
  Status Move(const RuntimeBindingFragment& fragment, uint8_t* host,
              bool to_device);
  Result<StreamHandle> StreamOf(int device);

  std::shared_ptr<DeviceApi> api_;
  DeviceStreams streams_{api_};
};

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_FRAGMENT_STAGING_H_
