// Internal to the api layer: the second step of a converting reshard into
// CUDA targets. The staging fragments of converting tensors live in device
// memory of the target's device (DeviceApi::Malloc, owned here), and each
// converting target fragment is computed from them by the FP8 and cast
// kernels (exec_cuda/convert_kernels.h) on a stream of that device, with
// the same box and block arithmetic as bind/apply_conversion.h, so the
// bytes are the CPU path's bit for bit.

#ifndef RESHARD_API_DEVICE_CONVERSION_H_
#define RESHARD_API_DEVICE_CONVERSION_H_

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "bind/apply_conversion.h"
#include "exec_cuda/device_api.h"
#include "exec_cuda/device_streams.h"
#include "reshard/conversion.h"

namespace reshard::internal {

// Not thread-safe. Streams and allocations are released when destroyed
// (after waiting for the streams).
class DeviceConverter {
 public:
  explicit DeviceConverter(std::shared_ptr<cuda::DeviceApi> api)
      : api_(std::move(api)) {}
  ~DeviceConverter();
  DeviceConverter(const DeviceConverter&) = delete;
  DeviceConverter& operator=(const DeviceConverter&) = delete;

  cuda::DeviceApi& api() const { return *api_; }

  // `bytes` of device memory on `device`, held until destruction.
  Result<void*> Allocate(int device, size_t bytes);

  // Converts every target fragment of a converting tensor that
  // `target_of` holds (device memory, contiguous row-major) from its
  // staging fragment in `staging_of` (device memory), as ApplyConversions
  // does on the host; quantizing also fills the participant's scale
  // fragments. Returns once every stream used finished.
  Status Apply(const ConversionPlan& plan, const FragmentMemory& staging_of,
               const FragmentMemory& target_of);

 private:
  struct Job;
  Result<cuda::StreamHandle> StreamOf(int device);
  Status Run(const ConversionPlan& plan, const Job& job,
             const FragmentMemory& staging_of, const FragmentMemory& target_of);
  Status Quantize(const Job& job, const void* src,
                  const FragmentMemory& target_of);
  Status Dequantize(const ConversionPlan& plan, const Job& job,
                    const std::string& staged_id, const void* src,
                    const FragmentMemory& staging_of);

  std::shared_ptr<cuda::DeviceApi> api_;
  cuda::DeviceStreams streams_{api_};
  std::vector<void*> owned_;
};

}  // namespace reshard::internal

#endif  // RESHARD_API_DEVICE_CONVERSION_H_
