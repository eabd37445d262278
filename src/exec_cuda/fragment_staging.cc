#include "exec_cuda/fragment_staging.h"

#include <string>
#include <utility>

#include "bind/binding_copy.h"
#include "exec_cuda/copy_lowering.h"
#include "exec_cuda/cuda_transport.h"

namespace reshard::cuda {

Result<RuntimeBindingFragment> HostStagingFragment(
    const RuntimeBindingFragment& f, uint8_t* address) {
  RuntimeBindingFragmentSpec spec = internal::SpecOf(f);
  const auto at = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(address));
  spec.address = at;
  spec.storage_address = at;
  spec.storage_offset_bytes = 0;
  spec.storage_nbytes = f.nbytes();
  spec.device = "cpu";
  spec.strides_bytes = *CanonicalStrides(f.local_shape(), f.itemsize());
  spec.owner = nullptr;
  return RuntimeBindingFragment::Make(std::move(spec));
}

Result<std::shared_ptr<DeviceApi>> StagingDeviceApi(
    std::shared_ptr<DeviceApi> injected) {
  if (injected != nullptr) return injected;
  RESHARD_ASSIGN_OR_RETURN(std::shared_ptr<DeviceApi> api, RuntimeDeviceApi());
  RESHARD_ASSIGN_OR_RETURN(int devices, api->DeviceCount());
  if (devices == 0) {
    return Status::FailedPrecondition(
        "CUDA executor unavailable: no CUDA device on this machine");
  }
  return api;
}

Result<PinnedBuffer> PinnedBuffer::Make(std::shared_ptr<DeviceApi> api,
                                        size_t bytes) {
  RESHARD_ASSIGN_OR_RETURN(void* p, api->MallocHost(bytes));
  return PinnedBuffer(std::move(api), static_cast<uint8_t*>(p), bytes);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : api_(std::move(other.api_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    api_ = std::move(other.api_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { Release(); }

void PinnedBuffer::Release() {
  if (data_ != nullptr) (void)api_->FreeHost(data_);
  data_ = nullptr;
  size_ = 0;
}

FragmentStaging::~FragmentStaging() = default;

Status FragmentStaging::ToFragment(const uint8_t* host,
                                   const RuntimeBindingFragment& fragment) {
  return Move(fragment, const_cast<uint8_t*>(host), /*to_device=*/true);
}

Status FragmentStaging::FromFragment(const RuntimeBindingFragment& fragment,
                                     uint8_t* host) {
  return Move(fragment, host, /*to_device=*/false);
}

Result<StreamHandle> FragmentStaging::StreamOf(int device) {
  return streams_.Of(device);
}

namespace {

// The fragment as one region between its own memory and a contiguous
// row-major host buffer (elements as the rows; LowerRegion folds the
// contiguous loops into longer rows).
BoundRegion FragmentRegion(const RuntimeBindingFragment& f, uint64_t host,
                           bool to_device) {
  BoundRegion r;
  r.source_address = to_device ? host : f.address();
  r.target_address = to_device ? f.address() : host;
  r.inner_bytes = static_cast<uint64_t>(f.itemsize());
  r.bytes = f.nbytes();
  const Dims& shape = f.local_shape();
  const Dims& strides = f.strides_bytes();
  std::vector<OuterLoop> loops(shape.size());
  uint64_t packed = r.inner_bytes;
  for (size_t d = shape.size(); d-- > 0;) {
    const auto device_stride = static_cast<uint64_t>(strides[d]);
    loops[d] = {static_cast<uint64_t>(shape[d]),
                to_device ? packed : device_stride,
                to_device ? device_stride : packed};
    packed *= static_cast<uint64_t>(shape[d]);
  }
  r.loops = std::move(loops);
  return r;
}

}  // namespace

Status FragmentStaging::Move(const RuntimeBindingFragment& f, uint8_t* host,
                             bool to_device) {
  if (f.nbytes() == 0) return Status::OK();
  const auto* address =
      reinterpret_cast<const void*>(static_cast<uintptr_t>(f.address()));
  RESHARD_ASSIGN_OR_RETURN(PointerInfo where, api_->Pointer(address));
  if (!where.on_device()) {
    return Status::InvalidArgument("fragment " + f.placement_fragment_id() +
                                   " (device \"" + f.device() +
                                   "\") is not in CUDA device memory");
  }
  const BoundRegion region = FragmentRegion(
      f, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(host)), to_device);
  LoweringLimits limits;
  limits.max_pitch = api_->MaxPitch();
  limits.kernel_allowed = false;  // the kernel cannot reach the host side
  RESHARD_ASSIGN_OR_RETURN(RegionWork work, LowerRegion(region, limits));
  RESHARD_ASSIGN_OR_RETURN(StreamHandle stream, StreamOf(where.device));
  const CopyKind kind =
      to_device ? CopyKind::kHostToDevice : CopyKind::kDeviceToHost;
  for (Copy3D& c : work.copies) {
    c.kind = kind;
    Status st =
        c.extent.depth == 1
            ? api_->Copy2DAsync(c.dst.ptr, c.dst.pitch, c.src.ptr, c.src.pitch,
                                c.extent.width, c.extent.height, kind, stream)
            : api_->Copy3DAsync(c, stream);
    if (!st.ok()) {
      (void)api_->SynchronizeStream(stream);  // what was queued may run
      return st;
    }
  }
  return api_->SynchronizeStream(stream);
}

}  // namespace reshard::cuda
