#include "exec_nccl/nccl_device_emulation.h"

#include <string>
#include <utility>
#include <vector>

namespace reshard::nccl {
namespace {

class EmulatedDeviceMemory final : public NcclMemory {
 public:
  EmulatedDeviceMemory(std::shared_ptr<HostNcclApi> api,
                       std::shared_ptr<cuda::DeviceApi> device)
      : host_(MakeHostMemory(std::move(api))), device_(std::move(device)) {}

  MemoryKind kind() const override { return MemoryKind::kCuda; }

  Result<cuda::StreamHandle> CreateStream() override {
    return host_->CreateStream();
  }
  void DestroyStream(cuda::StreamHandle stream) override {
    host_->DestroyStream(stream);
  }
  Result<bool> Done(cuda::StreamHandle stream) override {
    return host_->Done(stream);
  }
  Result<uint8_t*> Allocate(uint64_t bytes) override {
    return host_->Allocate(bytes);
  }
  void Release(uint8_t* buffer) override { host_->Release(buffer); }
  Status Upload(const void* host, uint8_t* buffer, uint64_t bytes,
                cuda::StreamHandle stream) override {
    return host_->Upload(host, buffer, bytes, stream);
  }
  Status Download(const uint8_t* buffer, void* host, uint64_t bytes,
                  cuda::StreamHandle stream) override {
    return host_->Download(buffer, host, bytes, stream);
  }
  // As the library's device memory: the regions' sides this rank moves
  // must be device memory; a buffer (host memory) is staged.
  Status CheckReachable(const ExchangeOp& op,
                        const std::string& what) override {
    if (op.buffer != nullptr) return Status::OK();
    const bool send = op.kind == ExchangeOp::Kind::kSend;
    std::vector<const BoundRegion*> regions = {op.region};
    regions.insert(regions.end(), op.more.begin(), op.more.end());
    for (const BoundRegion* r : regions) {
      const uint64_t address = send ? r->source_address : r->target_address;
      RESHARD_ASSIGN_OR_RETURN(
          cuda::PointerInfo info,
          device_->Pointer(reinterpret_cast<const void*>(address)));
      if (!info.on_device()) {
        return Status::InvalidArgument(
            what + ": region " + std::to_string(r->region) + "'s " +
            (send ? "source" : "target") +
            " is host memory; the nccl exchange moves device memory only");
      }
    }
    return Status::OK();
  }
  uint8_t* InPlace(const ExchangeOp& op) override { return host_->InPlace(op); }
  Status Pack(const ExchangeOp& op, uint8_t* buffer,
              cuda::StreamHandle stream) override {
    return host_->Pack(op, buffer, stream);
  }
  Status Unpack(const ExchangeOp& op, const uint8_t* buffer,
                cuda::StreamHandle stream) override {
    return host_->Unpack(op, buffer, stream);
  }

 private:
  std::unique_ptr<NcclMemory> host_;
  std::shared_ptr<cuda::DeviceApi> device_;
};

}  // namespace

std::unique_ptr<NcclMemory> MakeEmulatedDeviceMemory(
    std::shared_ptr<HostNcclApi> api, std::shared_ptr<cuda::DeviceApi> device) {
  return std::make_unique<EmulatedDeviceMemory>(std::move(api),
                                                std::move(device));
}

}  // namespace reshard::nccl
