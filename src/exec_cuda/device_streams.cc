#include "exec_cuda/device_streams.h"

namespace reshard::cuda {

DeviceStreams::~DeviceStreams() {
  for (auto& [device, stream] : streams_) {
    (void)api_->SynchronizeStream(stream);
    (void)api_->DestroyStream(stream);
  }
}

Result<StreamHandle> DeviceStreams::Of(int device) {
  auto it = streams_.find(device);
  if (it == streams_.end()) {
    RESHARD_ASSIGN_OR_RETURN(StreamHandle h, api_->CreateStream(device));
    it = streams_.emplace(device, h).first;
  }
  return it->second;
}

Status DeviceStreams::SynchronizeAll(Status first) {
  for (auto& [device, stream] : streams_) {
    Status waited = api_->SynchronizeStream(stream);
    if (first.ok()) first = std::move(waited);
  }
  return first;
}

}  // namespace reshard::cuda
