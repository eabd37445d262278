#include "live/device_regions.h"

#include <xxhash.h>
#if RESHARD_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <utility>

#include "exec_cuda/copy_lowering.h"

namespace reshard::live_internal {

BoundRegion SideAsSource(const BoundRegion& region, RegionSide side) {
  BoundRegion s = region;
  if (side == RegionSide::kTarget) {
    s.source_address = region.target_address;
    for (OuterLoop& loop : s.loops) loop.source_stride = loop.target_stride;
  }
  s.target_address = 0;
  for (OuterLoop& loop : s.loops) loop.target_stride = 0;
  return s;
}

BoundRegion PackedAt(BoundRegion piece, uint64_t address) {
  uint64_t stride = piece.inner_bytes;
  for (size_t i = piece.loops.size(); i-- > 0;) {
    piece.loops[i].target_stride = stride;
    stride *= piece.loops[i].count;
  }
  piece.target_address = address;
  return piece;
}

namespace {

constexpr uint8_t kSourceOnDevice = 1;
constexpr uint8_t kTargetOnDevice = 2;

const void* At(uint64_t address) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(address));
}

// `region`'s source side cut, in stream order, into pieces of at most
// `budget` bytes each: whole iterations of the outermost loop where one
// fits, else each iteration cut by the loops inside it, a single row cut
// into byte ranges.
void Split(const BoundRegion& region, uint64_t budget,
           std::vector<BoundRegion>* out) {
  if (region.bytes <= budget) {
    out->push_back(region);
    return;
  }
  if (region.loops.empty()) {
    for (uint64_t at = 0; at < region.inner_bytes; at += budget) {
      const uint64_t n = std::min(budget, region.inner_bytes - at);
      out->push_back({region.source_address + at, 0, n, {}, n, region.region});
    }
    return;
  }
  const OuterLoop outer = region.loops[0];
  const uint64_t per = region.bytes / outer.count;
  BoundRegion inner = region;
  inner.loops.erase(inner.loops.begin());
  inner.bytes = per;
  if (per <= budget) {
    const uint64_t take = budget / per;
    for (uint64_t i = 0; i < outer.count; i += take) {
      BoundRegion piece = region;
      piece.loops[0].count = std::min(take, outer.count - i);
      piece.source_address = region.source_address + i * outer.source_stride;
      piece.bytes = piece.loops[0].count * per;
      out->push_back(std::move(piece));
    }
    return;
  }
  for (uint64_t i = 0; i < outer.count; ++i) {
    inner.source_address = region.source_address + i * outer.source_stride;
    Split(inner, budget, out);
  }
}

// Queues `work` on `stream` as copies of `kind` (and its kernel).
Status Queue(cuda::DeviceApi& api, cuda::RegionWork& work, cuda::CopyKind kind,
             cuda::StreamHandle stream) {
  for (cuda::Copy3D& c : work.copies) {
    c.kind = kind;
    RESHARD_RETURN_NOT_OK(
        c.extent.depth == 1
            ? api.Copy2DAsync(c.dst.ptr, c.dst.pitch, c.src.ptr, c.src.pitch,
                              c.extent.width, c.extent.height, kind, stream)
            : api.Copy3DAsync(c, stream));
  }
  if (work.kernel) {
    RESHARD_RETURN_NOT_OK(api.LaunchGatherScatter(*work.kernel, stream));
  }
  return Status::OK();
}

cuda::CopyKind KindOf(bool source_on_device, bool target_on_device) {
  if (source_on_device) {
    return target_on_device ? cuda::CopyKind::kDeviceToDevice
                            : cuda::CopyKind::kDeviceToHost;
  }
  return target_on_device ? cuda::CopyKind::kHostToDevice
                          : cuda::CopyKind::kHostToHost;
}

}  // namespace

DeviceRegions::DeviceRegions(std::string session,
                             std::shared_ptr<cuda::DeviceApi> api,
                             uint64_t staging_bytes)
    : session_(std::move(session)),
      api_(std::move(api)),
      staging_limit_(std::max<uint64_t>(staging_bytes, 1)),
      state_(XXH3_createState()) {}

DeviceRegions::~DeviceRegions() {
  // Queued copies end before the staging they may write is freed.
  (void)streams_.SynchronizeAll();
  staging_.reset();
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

Status DeviceRegions::Classify(const std::vector<BoundRegion>& regions) {
  std::vector<uint8_t> sides;
  for (const BoundRegion& r : regions) {
    if (r.region >= sides.size()) sides.resize(r.region + 1, 0);
    if (r.bytes == 0) continue;
    RESHARD_ASSIGN_OR_RETURN(cuda::PointerInfo s,
                             api_->Pointer(At(r.source_address)));
    RESHARD_ASSIGN_OR_RETURN(cuda::PointerInfo t,
                             api_->Pointer(At(r.target_address)));
    sides[r.region] = (s.on_device() ? kSourceOnDevice : 0) |
                      (t.on_device() ? kTargetOnDevice : 0);
  }
  std::lock_guard<std::mutex> lock(mu_);
  sides_ = std::move(sides);
  return Status::OK();
}

bool DeviceRegions::OnDevice(const BoundRegion& region, RegionSide side) const {
  if (region.region >= sides_.size()) return false;
  return (sides_[region.region] &
          (side == RegionSide::kSource ? kSourceOnDevice : kTargetOnDevice)) !=
         0;
}

bool DeviceRegions::OnDevice(const BoundRegion& region) const {
  return region.region < sides_.size() && sides_[region.region] != 0;
}

Result<cuda::StreamHandle> DeviceRegions::StreamOf(int device) {
  return streams_.Of(device);
}

Result<int> DeviceRegions::DeviceOf(uint64_t address) {
  RESHARD_ASSIGN_OR_RETURN(cuda::PointerInfo info, api_->Pointer(At(address)));
  return info.device;
}

Status DeviceRegions::Copy(const std::vector<const BoundRegion*>& regions) {
  std::lock_guard<std::mutex> lock(mu_);
  Status st;
  for (const BoundRegion* r : regions) {
    if (r->bytes == 0) continue;
    const bool s = OnDevice(*r, RegionSide::kSource);
    const bool t = OnDevice(*r, RegionSide::kTarget);
    Result<int> device = DeviceOf(t ? r->target_address : r->source_address);
    if (!device.ok()) {
      st = device.status();
      break;
    }
    Result<cuda::StreamHandle> stream = StreamOf(std::max(*device, 0));
    if (!stream.ok()) {
      st = stream.status();
      break;
    }
    cuda::LoweringLimits limits;
    limits.max_pitch = api_->MaxPitch();
    limits.kernel_allowed = s && t;
    Result<cuda::RegionWork> work = cuda::LowerRegion(*r, limits);
    st = work.ok() ? Queue(*api_, *work, KindOf(s, t), *stream) : work.status();
    if (!st.ok()) break;
  }
  // What was queued runs (or may still run, after a refusal) either way.
  st = streams_.SynchronizeAll(std::move(st));
  if (!st.ok()) {
    return st.WithContext("live session " + session_ +
                          ": copying within this rank on the device");
  }
  return Status::OK();
}

Status DeviceRegions::QueueRead(const BoundRegion& piece, uint64_t offset,
                                cuda::StreamHandle stream) {
  const BoundRegion packed =
      PackedAt(piece, reinterpret_cast<uint64_t>(staging_->data()) + offset);
  cuda::LoweringLimits limits;
  limits.max_pitch = api_->MaxPitch();
  limits.kernel_allowed = false;  // the kernel cannot reach the host side
  RESHARD_ASSIGN_OR_RETURN(cuda::RegionWork work,
                           cuda::LowerRegion(packed, limits));
  return Queue(*api_, work, cuda::CopyKind::kDeviceToHost, stream);
}

Result<uint64_t> DeviceRegions::Hash(const BoundRegion& region,
                                     RegionSide side) {
  if (region.bytes == 0) return XXH3_64bits(nullptr, 0);
  std::lock_guard<std::mutex> lock(mu_);
  const BoundRegion whole = SideAsSource(region, side);
  const uint64_t budget = std::min(staging_limit_, region.bytes);
  if (staging_ == nullptr || staging_->size() < budget) {
    staging_.reset();
    RESHARD_ASSIGN_OR_RETURN(cuda::PinnedBuffer buffer,
                             cuda::PinnedBuffer::Make(api_, budget));
    staging_ = std::make_unique<cuda::PinnedBuffer>(std::move(buffer));
  }
  RESHARD_ASSIGN_OR_RETURN(int device, DeviceOf(whole.source_address));
  RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle stream,
                           StreamOf(std::max(device, 0)));
  std::vector<BoundRegion> pieces;
  Split(whole, budget, &pieces);
  auto* state = static_cast<XXH3_state_t*>(state_);
  XXH3_64bits_reset(state);
  uint64_t filled = 0;
  const auto drain = [&]() -> Status {
    RESHARD_RETURN_NOT_OK(api_->SynchronizeStream(stream));
    XXH3_64bits_update(state, staging_->data(), filled);
    staged_ += filled;
    filled = 0;
    return Status::OK();
  };
  for (const BoundRegion& piece : pieces) {
    if (filled + piece.bytes > budget) RESHARD_RETURN_NOT_OK(drain());
    Status st = QueueRead(piece, filled, stream);
    if (!st.ok()) {
      (void)api_->SynchronizeStream(stream);
      return st.WithContext("live session " + session_ + ": reading region " +
                            std::to_string(region.region) +
                            " from the device to hash it");
    }
    filled += piece.bytes;
  }
  RESHARD_RETURN_NOT_OK(drain());
  return XXH3_64bits_digest(state);
}

Status DeviceRegions::FlipFirstTargetByte(const BoundRegion& region,
                                          uint8_t mask) {
  std::lock_guard<std::mutex> lock(mu_);
  RESHARD_ASSIGN_OR_RETURN(int device, DeviceOf(region.target_address));
  RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle stream,
                           StreamOf(std::max(device, 0)));
  uint8_t byte = 0;
  void* target = const_cast<void*>(At(region.target_address));
  RESHARD_RETURN_NOT_OK(api_->Copy2DAsync(
      &byte, 1, target, 1, 1, 1, cuda::CopyKind::kDeviceToHost, stream));
  RESHARD_RETURN_NOT_OK(api_->SynchronizeStream(stream));
  byte ^= mask;
  RESHARD_RETURN_NOT_OK(api_->Copy2DAsync(
      target, 1, &byte, 1, 1, 1, cuda::CopyKind::kHostToDevice, stream));
  return api_->SynchronizeStream(stream);
}

uint64_t DeviceRegions::staged_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staged_;
}

uint64_t DeviceRegions::staging_buffer_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staging_ == nullptr ? 0 : staging_->size();
}

}  // namespace reshard::live_internal
