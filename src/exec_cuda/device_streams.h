// DeviceStreams: one stream per device of a DeviceApi, made the first time
// a device's is asked for and kept; what an owner that queues work on
// several devices, and waits for it, holds. Destruction waits for every
// stream and destroys it.

#ifndef RESHARD_EXEC_CUDA_DEVICE_STREAMS_H_
#define RESHARD_EXEC_CUDA_DEVICE_STREAMS_H_

#include <map>
#include <memory>

#include "exec_cuda/device_api.h"
#include "reshard/status.h"

namespace reshard::cuda {

class DeviceStreams {
 public:
  explicit DeviceStreams(std::shared_ptr<DeviceApi> api)
      : api_(std::move(api)) {}
  ~DeviceStreams();

  DeviceStreams(const DeviceStreams&) = delete;
  DeviceStreams& operator=(const DeviceStreams&) = delete;

  // The stream of `device` (made on first use).
  Result<StreamHandle> Of(int device);

  // Waits for every stream made so far (work may be queued on any, also
  // after a failure). Returns `first` when it is not OK (what failed
  // before the wait), else the first wait's error.
  Status SynchronizeAll(Status first = Status::OK());

 private:
  std::shared_ptr<DeviceApi> api_;
  std::map<int, StreamHandle> streams_;
};

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_DEVICE_STREAMS_H_
