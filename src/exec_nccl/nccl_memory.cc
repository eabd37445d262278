#include "exec_nccl/nccl_memory.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec_cuda/copy_lowering.h"
#include "live_exchange/side_stream.h"

namespace reshard::nccl {
namespace {

using ::reshard::internal::SideStream;

class HostMemory final : public NcclMemory {
 public:
  explicit HostMemory(std::shared_ptr<HostNcclApi> api)
      : api_(std::move(api)) {}

  MemoryKind kind() const override { return MemoryKind::kHost; }

  Result<cuda::StreamHandle> CreateStream() override {
    return api_->CreateStream();
  }
  void DestroyStream(cuda::StreamHandle stream) override {
    api_->DestroyStream(stream);
  }
  Result<bool> Done(cuda::StreamHandle stream) override {
    return api_->StreamIdle(stream);
  }
  Result<uint8_t*> Allocate(uint64_t bytes) override {
    return new uint8_t[std::max<uint64_t>(bytes, 1)];
  }
  void Release(uint8_t* buffer) override { delete[] buffer; }
  Status Upload(const void* host, uint8_t* buffer, uint64_t bytes,
                cuda::StreamHandle) override {
    if (bytes > 0) std::memcpy(buffer, host, bytes);
    return Status::OK();
  }
  Status Download(const uint8_t* buffer, void* host, uint64_t bytes,
                  cuda::StreamHandle) override {
    if (bytes > 0) std::memcpy(host, buffer, bytes);
    return Status::OK();
  }
  Status CheckReachable(const ExchangeOp&, const std::string&) override {
    return Status::OK();
  }
  uint8_t* InPlace(const ExchangeOp& op) override {
    const SideStream stream = SideStream::Of(op);
    return stream.contiguous() ? stream.sides[0].base : nullptr;
  }
  Status Pack(const ExchangeOp& op, uint8_t* buffer,
              cuda::StreamHandle) override {
    const SideStream stream = SideStream::Of(op);
    stream.Pack(0, stream.total_bytes, buffer);
    return Status::OK();
  }
  Status Unpack(const ExchangeOp& op, const uint8_t* buffer,
                cuda::StreamHandle) override {
    const SideStream stream = SideStream::Of(op);
    stream.Unpack(0, stream.total_bytes, buffer);
    return Status::OK();
  }

 private:
  std::shared_ptr<HostNcclApi> api_;
};

// `region` with the side at `packed` laid out contiguously (row by row, in
// the stream's order): the source side for an unpack, the target side for
// a pack.
BoundRegion WithPackedSide(const BoundRegion& region, uint64_t packed,
                           bool packed_is_source) {
  BoundRegion b = region;
  uint64_t stride = region.inner_bytes;
  for (size_t i = b.loops.size(); i-- > 0;) {
    (packed_is_source ? b.loops[i].source_stride : b.loops[i].target_stride) =
        stride;
    stride *= b.loops[i].count;
  }
  (packed_is_source ? b.source_address : b.target_address) = packed;
  return b;
}

std::vector<const BoundRegion*> RegionsOf(const ExchangeOp& op) {
  std::vector<const BoundRegion*> regions = {op.region};
  regions.insert(regions.end(), op.more.begin(), op.more.end());
  return regions;
}

class DeviceMemory final : public NcclMemory {
 public:
  DeviceMemory(std::shared_ptr<cuda::DeviceApi> api, int device)
      : api_(std::move(api)), device_(device) {}

  MemoryKind kind() const override { return MemoryKind::kCuda; }

  Result<cuda::StreamHandle> CreateStream() override {
    return api_->CreateStream(device_);
  }
  void DestroyStream(cuda::StreamHandle stream) override {
    (void)api_->DestroyStream(stream);
  }
  Result<bool> Done(cuda::StreamHandle stream) override {
    RESHARD_ASSIGN_OR_RETURN(cuda::EventHandle event,
                             api_->RecordEvent(stream));
    Result<bool> done = api_->EventDone(event);
    (void)api_->DestroyEvent(event);
    return done;
  }
  Result<uint8_t*> Allocate(uint64_t bytes) override {
    RESHARD_ASSIGN_OR_RETURN(
        void* p, api_->Malloc(device_, std::max<uint64_t>(bytes, 1)));
    return static_cast<uint8_t*>(p);
  }
  void Release(uint8_t* buffer) override { (void)api_->Free(buffer); }
  Status Upload(const void* host, uint8_t* buffer, uint64_t bytes,
                cuda::StreamHandle stream) override {
    if (bytes == 0) return Status::OK();
    return api_->Copy2DAsync(buffer, bytes, host, bytes, bytes, 1,
                             cuda::CopyKind::kHostToDevice, stream);
  }
  Status Download(const uint8_t* buffer, void* host, uint64_t bytes,
                  cuda::StreamHandle stream) override {
    if (bytes == 0) return Status::OK();
    RESHARD_RETURN_NOT_OK(api_->Copy2DAsync(host, bytes, buffer, bytes, bytes,
                                            1, cuda::CopyKind::kDeviceToHost,
                                            stream));
    return api_->SynchronizeStream(stream);
  }
  // Regions must lie in device memory on both sides this rank moves; a
  // buffer (a delta's encoded bytes, host memory) is staged.
  Status CheckReachable(const ExchangeOp& op,
                        const std::string& what) override {
    if (op.buffer != nullptr) return Status::OK();
    const bool send = op.kind == ExchangeOp::Kind::kSend;
    for (const BoundRegion* r : RegionsOf(op)) {
      const uint64_t address = send ? r->source_address : r->target_address;
      RESHARD_ASSIGN_OR_RETURN(
          cuda::PointerInfo info,
          api_->Pointer(reinterpret_cast<const void*>(address)));
      if (!info.on_device()) {
        return Status::InvalidArgument(
            what + ": region " + std::to_string(r->region) + "'s " +
            (send ? "source" : "target") +
            " is host memory; the nccl exchange moves device memory only");
      }
    }
    return Status::OK();
  }
  uint8_t* InPlace(const ExchangeOp& op) override {
    if (op.buffer != nullptr) return nullptr;
    const SideStream stream = SideStream::Of(op);
    return stream.contiguous() ? stream.sides[0].base : nullptr;
  }
  Status Pack(const ExchangeOp& op, uint8_t* buffer,
              cuda::StreamHandle stream) override {
    if (op.buffer != nullptr) {
      return Upload(op.buffer, buffer, op.buffer_bytes, stream);
    }
    return Move(op, buffer, /*packed_is_source=*/false, stream);
  }
  Status Unpack(const ExchangeOp& op, const uint8_t* buffer,
                cuda::StreamHandle stream) override {
    if (op.buffer != nullptr) {
      return Download(buffer, op.buffer, op.buffer_bytes, stream);
    }
    return Move(op, const_cast<uint8_t*>(buffer), /*packed_is_source=*/true,
                stream);
  }

 private:
  // Each region of `op` between its side and its place in `packed`, as the
  // CUDA executor lowers a region: pitched copies or the kernel.
  Status Move(const ExchangeOp& op, uint8_t* packed, bool packed_is_source,
              cuda::StreamHandle stream) {
    cuda::LoweringLimits limits;
    limits.max_pitch = api_->MaxPitch();
    uint64_t offset = 0;
    for (const BoundRegion* r : RegionsOf(op)) {
      const BoundRegion b = WithPackedSide(
          *r, reinterpret_cast<uint64_t>(packed) + offset, packed_is_source);
      offset += r->bytes;
      RESHARD_ASSIGN_OR_RETURN(cuda::RegionWork work,
                               cuda::LowerRegion(b, limits));
      for (cuda::Copy3D& c : work.copies) {
        c.kind = cuda::CopyKind::kDeviceToDevice;
        RESHARD_RETURN_NOT_OK(
            c.extent.depth == 1
                ? api_->Copy2DAsync(c.dst.ptr, c.dst.pitch, c.src.ptr,
                                    c.src.pitch, c.extent.width,
                                    c.extent.height, c.kind, stream)
                : api_->Copy3DAsync(c, stream));
      }
      if (work.kernel) {
        RESHARD_RETURN_NOT_OK(api_->LaunchGatherScatter(*work.kernel, stream));
      }
    }
    return Status::OK();
  }

  std::shared_ptr<cuda::DeviceApi> api_;
  int device_ = 0;
};

}  // namespace

std::unique_ptr<NcclMemory> MakeHostMemory(std::shared_ptr<HostNcclApi> api) {
  return std::make_unique<HostMemory>(std::move(api));
}

std::unique_ptr<NcclMemory> MakeDeviceMemory(
    std::shared_ptr<cuda::DeviceApi> api, int device) {
  return std::make_unique<DeviceMemory>(std::move(api), device);
}

}  // namespace reshard::nccl
