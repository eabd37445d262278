// The CUDA executor: Submit lowers every region (copy_lowering.h) and
// queues its copies or kernel on the stream of the device it concerns (the
// target's device, else the source's; host-to-host regions on device 0's),
// then records one event per stream it used; the transfer is complete when
// all of them are. A stream holds at most about max_queued_per_stream
// operations: every quarter of that an event is recorded, and past four
// outstanding ones Submit waits for the oldest.
#include "exec_cuda/cuda_transport.h"

#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec_cuda/copy_lowering.h"

namespace reshard::cuda {

namespace {

class CudaTransport final : public Transport {
 public:
  CudaTransport(std::shared_ptr<DeviceApi> api, CudaTransportOptions options)
      : api_(std::move(api)), options_(options) {
    caps_ = {
        "cuda", {MemoryKind::kHost, MemoryKind::kCuda}, options.max_in_flight};
  }
  ~CudaTransport() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [device, s] : streams_) {
      (void)api_->SynchronizeStream(s.handle);
      for (EventHandle e : s.batches) (void)api_->DestroyEvent(e);
      (void)api_->DestroyStream(s.handle);
    }
    for (auto& [id, t] : transfers_) {
      for (EventHandle e : t.events) (void)api_->DestroyEvent(e);
    }
  }

  const TransportCapabilities& capabilities() const override { return caps_; }
  Result<TransferId> Submit(const BoundTransferPlan& plan) override;
  Result<TransferState> Poll(TransferId id) override;
  Status Wait(TransferId id) override;

 private:
  struct Stream {
    StreamHandle handle = 0;
    uint64_t queued = 0;  // operations since the last batch event
    std::deque<EventHandle> batches;
  };
  struct Transfer {
    std::vector<EventHandle> events;
    TransferState state = TransferState::kPending;
    Status status;
  };

  Result<Stream*> StreamOf(int device);
  Status Throttle(Stream& s);
  Status EnablePeers(int device, int peer);
  Status Enqueue(const BoundRegion& region, std::set<Stream*>* used);
  Status Finish(Transfer& t);

  std::shared_ptr<DeviceApi> api_;
  CudaTransportOptions options_;
  TransportCapabilities caps_;
  std::mutex mu_;
  std::map<int, Stream> streams_;
  std::set<std::pair<int, int>> peers_enabled_;
  std::map<TransferId, Transfer> transfers_;
  TransferId next_id_ = 1;
  size_t pending_ = 0;
};

Result<CudaTransport::Stream*> CudaTransport::StreamOf(int device) {
  auto it = streams_.find(device);
  if (it == streams_.end()) {
    RESHARD_ASSIGN_OR_RETURN(StreamHandle h, api_->CreateStream(device));
    it = streams_.emplace(device, Stream{h, 0, {}}).first;
  }
  return &it->second;
}

Status CudaTransport::Throttle(Stream& s) {
  const uint64_t batch =
      std::max<uint64_t>(1, options_.max_queued_per_stream / 4);
  if (++s.queued < batch) return Status::OK();
  s.queued = 0;
  RESHARD_ASSIGN_OR_RETURN(EventHandle e, api_->RecordEvent(s.handle));
  s.batches.push_back(e);
  while (s.batches.size() > 4) {
    const EventHandle oldest = s.batches.front();
    while (true) {
      RESHARD_ASSIGN_OR_RETURN(bool done, api_->EventDone(oldest));
      if (done) break;
      std::this_thread::yield();
    }
    s.batches.pop_front();
    RESHARD_RETURN_NOT_OK(api_->DestroyEvent(oldest));
  }
  return Status::OK();
}

Status CudaTransport::EnablePeers(int device, int peer) {
  if (device == peer || peers_enabled_.count({device, peer}) != 0) {
    return Status::OK();
  }
  RESHARD_ASSIGN_OR_RETURN(bool can, api_->CanAccessPeer(device, peer));
  if (!can) {
    return Status::FailedPrecondition(
        "CUDA device " + std::to_string(device) + " cannot access device " +
        std::to_string(peer) + " (no peer access between them)");
  }
  RESHARD_RETURN_NOT_OK(api_->EnablePeerAccess(device, peer));
  peers_enabled_.insert({device, peer});
  return Status::OK();
}

CopyKind KindOf(const PointerInfo& src, const PointerInfo& dst) {
  if (src.on_device()) {
    return dst.on_device() ? CopyKind::kDeviceToDevice
                           : CopyKind::kDeviceToHost;
  }
  return dst.on_device() ? CopyKind::kHostToDevice : CopyKind::kHostToHost;
}

Status CudaTransport::Enqueue(const BoundRegion& region,
                              std::set<Stream*>* used) {
  const auto* src = reinterpret_cast<const void*>(
      static_cast<uintptr_t>(region.source_address));
  const auto* dst = reinterpret_cast<const void*>(
      static_cast<uintptr_t>(region.target_address));
  RESHARD_ASSIGN_OR_RETURN(PointerInfo s, api_->Pointer(src));
  RESHARD_ASSIGN_OR_RETURN(PointerInfo d, api_->Pointer(dst));
  const int device = d.on_device() ? d.device : (s.on_device() ? s.device : 0);
  if (s.on_device() && d.on_device()) {
    RESHARD_RETURN_NOT_OK(EnablePeers(d.device, s.device));
  }
  LoweringLimits limits;
  limits.max_pitch = api_->MaxPitch();
  limits.max_copies = options_.max_copies_per_region;
  limits.kernel_allowed = s.on_device() && d.on_device();
  RESHARD_ASSIGN_OR_RETURN(RegionWork work, LowerRegion(region, limits));
  RESHARD_ASSIGN_OR_RETURN(Stream * stream, StreamOf(device));
  used->insert(stream);
  const CopyKind kind = KindOf(s, d);
  for (Copy3D& c : work.copies) {
    c.kind = kind;
    if (c.extent.depth == 1) {
      RESHARD_RETURN_NOT_OK(api_->Copy2DAsync(
          c.dst.ptr, c.dst.pitch, c.src.ptr, c.src.pitch, c.extent.width,
          c.extent.height, kind, stream->handle));
    } else {
      RESHARD_RETURN_NOT_OK(api_->Copy3DAsync(c, stream->handle));
    }
    RESHARD_RETURN_NOT_OK(Throttle(*stream));
  }
  if (work.kernel) {
    RESHARD_RETURN_NOT_OK(
        api_->LaunchGatherScatter(*work.kernel, stream->handle));
    RESHARD_RETURN_NOT_OK(Throttle(*stream));
  }
  return Status::OK();
}

Result<TransferId> CudaTransport::Submit(const BoundTransferPlan& plan) {
  RESHARD_RETURN_NOT_OK(plan.RequireMemoryKinds(caps_.memory_kinds, "cuda"));
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_ >= options_.max_in_flight) {
    return Status::ResourceExhausted(
        "cuda executor: " + std::to_string(pending_) +
        " transfers in flight, the most it takes (max_in_flight)");
  }
  std::set<Stream*> used;
  Transfer t;
  for (const BoundRegion& region : plan.regions()) {
    Status st = Enqueue(region, &used);
    if (!st.ok()) {
      // What was queued may still run: wait for it before failing.
      for (Stream* s : used) (void)api_->SynchronizeStream(s->handle);
      return st.WithContext("cuda executor, region " +
                            std::to_string(region.region));
    }
  }
  for (Stream* s : used) {
    RESHARD_ASSIGN_OR_RETURN(EventHandle e, api_->RecordEvent(s->handle));
    t.events.push_back(e);
  }
  const TransferId id = next_id_++;
  transfers_.emplace(id, std::move(t));
  ++pending_;
  return id;
}

Status CudaTransport::Finish(Transfer& t) {
  for (EventHandle e : t.events) (void)api_->DestroyEvent(e);
  t.events.clear();
  --pending_;
  return t.status;
}

Result<TransferState> CudaTransport::Poll(TransferId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = transfers_.find(id);
  if (it == transfers_.end()) {
    return Status::NotFound("cuda executor: no transfer " + std::to_string(id));
  }
  Transfer& t = it->second;
  if (t.state != TransferState::kPending) return t.state;
  for (EventHandle e : t.events) {
    Result<bool> done = api_->EventDone(e);
    if (!done.ok()) {
      t.status = done.status();
      t.state = TransferState::kFailed;
      (void)Finish(t);
      return t.state;
    }
    if (!*done) return TransferState::kPending;
  }
  t.state = TransferState::kCompleted;
  (void)Finish(t);
  return t.state;
}

Status CudaTransport::Wait(TransferId id) {
  while (true) {
    RESHARD_ASSIGN_OR_RETURN(TransferState state, Poll(id));
    if (state != TransferState::kPending) break;
    std::this_thread::yield();
  }
  std::lock_guard<std::mutex> lock(mu_);
  return transfers_.at(id).status;
}

}  // namespace

std::unique_ptr<Transport> MakeTransportOver(
    std::shared_ptr<DeviceApi> api, const CudaTransportOptions& options) {
  return std::make_unique<CudaTransport>(std::move(api), options);
}

}  // namespace reshard::cuda

namespace reshard {

Result<std::unique_ptr<Transport>> MakeCudaTransport(
    const CudaTransportOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(std::shared_ptr<cuda::DeviceApi> api,
                           cuda::RuntimeDeviceApi());
  RESHARD_ASSIGN_OR_RETURN(int devices, api->DeviceCount());
  if (devices == 0) {
    return Status::FailedPrecondition(
        "CUDA executor unavailable: no CUDA device on this machine");
  }
  return cuda::MakeTransportOver(std::move(api), options);
}

}  // namespace reshard
