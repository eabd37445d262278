// HostDeviceApi: the device API over host memory (host_device_api.h).
//
// A copy is checked in the order the messages below appear: the stream,
// the kind, a zero extent (a no-op), each side's shape (null pointer,
// maximum pitch, row and slice bounds), each side's address arithmetic
// (every product and sum guarded against overflow), where each pointer
// lies against the kind, each device side against its allocation, peer
// access, and last whether the two sides share bytes.
#include "exec_cuda/host_device_api.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace reshard::cuda {

std::string_view CopyKindName(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToHost:
      return "HostToHost";
    case CopyKind::kHostToDevice:
      return "HostToDevice";
    case CopyKind::kDeviceToHost:
      return "DeviceToHost";
    case CopyKind::kDeviceToDevice:
      return "DeviceToDevice";
    case CopyKind::kDefault:
      return "Default";
  }
  return "invalid";
}

namespace host_emulation {

// One side of a copy: the pointer, its pitch and slice height, the
// position of the copy in it, and the names these fields have in messages
// (cudaMemcpy3DParms' for Copy3DAsync, cudaMemcpy2D's parameters for
// Copy2DAsync, which has no positions: their names are empty).
struct CopySide {
  const uint8_t* ptr = nullptr;
  size_t pitch = 0, ysize = 0, x = 0, y = 0, z = 0;
  std::string_view ptr_name, pitch_name, ysize_name, x_name, y_name, z_name;
  // Set by ComputeSpan: offsets from ptr of the first byte copied and of
  // one past the last.
  size_t first = 0, end = 0;
};

}  // namespace host_emulation

namespace {

using host_emulation::CopySide;

// The names of an extent's fields in messages.
struct ExtentNames {
  std::string_view width, height, depth;
};
constexpr ExtentNames k3DExtent{"extent.width", "extent.height",
                                "extent.depth"};
constexpr ExtentNames k2DExtent{"width", "height", ""};

std::string Named(std::string_view name, uint64_t value) {
  return std::string(name) + " " + std::to_string(value);
}

using host_emulation::Refuse;

Status Overflow(const std::string& expression, std::string_view type) {
  return Refuse("cudaErrorInvalidValue",
                expression + " overflows " + std::string(type));
}

bool Add(uint64_t a, uint64_t b, uint64_t* sum) {
  return !__builtin_add_overflow(a, b, sum);
}
bool Mul(uint64_t a, uint64_t b, uint64_t* product) {
  return !__builtin_mul_overflow(a, b, product);
}

bool ValidKind(CopyKind kind) {
  return static_cast<unsigned>(kind) <=
         static_cast<unsigned>(CopyKind::kDefault);
}

std::string KindText(CopyKind kind) {
  if (ValidKind(kind)) return std::string(CopyKindName(kind));
  return std::to_string(static_cast<unsigned>(kind));
}

Status CheckKind(CopyKind kind) {
  if (ValidKind(kind)) return Status::OK();
  return Refuse("cudaErrorInvalidMemcpyDirection",
                "kind " + KindText(kind) + " is not a cudaMemcpyKind (0 to 4)");
}

CopySide Side3D(const PitchedPtr& p, const Pos& pos, bool src) {
  CopySide s;
  s.ptr = static_cast<const uint8_t*>(p.ptr);
  s.pitch = p.pitch;
  s.ysize = p.ysize;
  s.x = pos.x;
  s.y = pos.y;
  s.z = pos.z;
  s.ptr_name = src ? "srcPtr.ptr" : "dstPtr.ptr";
  s.pitch_name = src ? "srcPtr.pitch" : "dstPtr.pitch";
  s.ysize_name = src ? "srcPtr.ysize" : "dstPtr.ysize";
  s.x_name = src ? "srcPos.x" : "dstPos.x";
  s.y_name = src ? "srcPos.y" : "dstPos.y";
  s.z_name = src ? "srcPos.z" : "dstPos.z";
  return s;
}

CopySide Side2D(const void* ptr, size_t pitch, size_t height, bool src) {
  CopySide s;
  s.ptr = static_cast<const uint8_t*>(ptr);
  s.pitch = pitch;
  s.ysize = height;
  s.ptr_name = src ? "src" : "dst";
  s.pitch_name = src ? "spitch" : "dpitch";
  return s;
}

Status CheckMaxPitch(std::string_view name, size_t pitch, size_t max_pitch) {
  if (pitch <= max_pitch) return Status::OK();
  return Refuse("cudaErrorInvalidPitchValue",
                Named(name, pitch) + " exceeds the maximum pitch " +
                    std::to_string(max_pitch));
}

// cudaMemcpy3D's bounds on one side: a row of the copy lies inside the
// pitch, and in a copy of several slices the rows of a slice lie inside
// the slice height (ysize), which is what separates slices.
Status CheckShape3D(const CopySide& s, const Extent& e, size_t max_pitch) {
  if (s.ptr == nullptr) {
    return Refuse("cudaErrorInvalidValue",
                  std::string(s.ptr_name) + " is null");
  }
  RESHARD_RETURN_NOT_OK(CheckMaxPitch(s.pitch_name, s.pitch, max_pitch));
  const std::string row =
      Named(s.x_name, s.x) + " + " + Named(k3DExtent.width, e.width);
  uint64_t row_end = 0;
  if (!Add(s.x, e.width, &row_end)) return Overflow(row, "size_t");
  if (row_end > s.pitch) {
    return Refuse("cudaErrorInvalidValue",
                  row + " exceeds " + Named(s.pitch_name, s.pitch));
  }
  if (e.depth <= 1) return Status::OK();
  const std::string rows =
      Named(s.y_name, s.y) + " + " + Named(k3DExtent.height, e.height);
  uint64_t rows_end = 0;
  if (!Add(s.y, e.height, &rows_end)) return Overflow(rows, "size_t");
  if (rows_end > s.ysize) {
    return Refuse("cudaErrorInvalidValue",
                  rows + " exceeds " + Named(s.ysize_name, s.ysize) +
                      ", the slice height of a copy of " +
                      Named(k3DExtent.depth, e.depth));
  }
  return Status::OK();
}

// Sets s->first and s->end (element (x, y, z) is at
// ptr + z * pitch * ysize + y * pitch + x), refusing any overflow of the
// address arithmetic. The extent is not empty.
Status ComputeSpan(CopySide* s, const Extent& e, const ExtentNames& n) {
  uint64_t z_last = 0, slice = 0, z_offset = 0;
  const std::string z_text =
      Named(s->z_name, s->z) + " + " + Named(n.depth, e.depth) + " - 1";
  if (!Add(s->z, e.depth - 1, &z_last)) return Overflow(z_text, "size_t");
  if (z_last > 0) {
    const std::string slice_text =
        Named(s->pitch_name, s->pitch) + " * " + Named(s->ysize_name, s->ysize);
    if (!Mul(s->pitch, s->ysize, &slice)) {
      return Overflow(slice_text, "size_t");
    }
    if (!Mul(z_last, slice, &z_offset)) {
      return Overflow("(" + z_text + ") * " + slice_text, "size_t");
    }
  }
  const std::string y_text =
      s->y_name.empty()
          ? Named(n.height, e.height) + " - 1"
          : Named(s->y_name, s->y) + " + " + Named(n.height, e.height) + " - 1";
  uint64_t y_last = 0, y_offset = 0, end = 0;
  if (!Add(s->y, e.height - 1, &y_last)) return Overflow(y_text, "size_t");
  if (!Mul(y_last, s->pitch, &y_offset)) {
    return Overflow("(" + y_text + ") * " + Named(s->pitch_name, s->pitch),
                    "size_t");
  }
  if (!Add(z_offset, y_offset, &end) || !Add(end, s->x, &end) ||
      !Add(end, e.width, &end)) {
    return Overflow("the offset of the end of the bytes copied at " +
                        std::string(s->ptr_name),
                    "size_t");
  }
  uintptr_t last = 0;
  if (!Add(reinterpret_cast<uintptr_t>(s->ptr), end, &last)) {
    return Overflow(std::string(s->ptr_name) + " + " + std::to_string(end) +
                        " (the end of the bytes copied)",
                    "the address space");
  }
  // Each term is at most its counterpart in `end`: no overflow.
  s->first = s->z * slice + s->y * s->pitch + s->x;
  s->end = end;
  return Status::OK();
}

// Refuses source and destination bytes in common (CUDA leaves such a copy
// undefined). Each side's rows are disjoint and ascend (the shape checks
// keep every row inside its pitch and, across slices, inside ysize), so
// one merge over both lists of rows finds a shared byte.
Status CheckOverlap(const CopySide& src, const CopySide& dst, size_t width,
                    size_t height, size_t depth) {
  const uintptr_t s = reinterpret_cast<uintptr_t>(src.ptr);
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst.ptr);
  if (s + src.end <= d + dst.first || d + dst.end <= s + src.first) {
    return Status::OK();
  }
  auto row = [height](const CopySide& c, uintptr_t base, uint64_t k) {
    return base + (c.z + k / height) * (c.pitch * c.ysize) +
           (c.y + k % height) * c.pitch + c.x;
  };
  const uint64_t rows = height * depth;  // each a distinct address
  for (uint64_t i = 0, j = 0; i < rows && j < rows;) {
    const uintptr_t a = row(src, s, i), b = row(dst, d, j);
    if (a + width <= b) {
      ++i;
    } else if (b + width <= a) {
      ++j;
    } else {
      return Status::InvalidArgument(
          "overlapping source and destination (undefined in CUDA): source "
          "row " +
          std::to_string(i) + " and destination row " + std::to_string(j) +
          " of the copy share bytes (rows count slice by slice)");
    }
  }
  return Status::OK();
}

// The CUDA error a refusal stands for: its message up to the first ':'.
std::string_view ErrorName(const Status& st) {
  const std::string_view m = st.message();
  return m.substr(0, m.find(':'));
}

}  // namespace

HostDeviceApi::HostDeviceApi(HostDeviceApiOptions options)
    : options_(std::move(options)) {
  allocated_.assign(static_cast<size_t>(std::max(options_.devices, 0)), 0);
}

std::unique_ptr<HostDeviceApi> HostDeviceApi::Make(
    HostDeviceApiOptions options) {
  options.devices = std::max(options.devices, 0);
  return std::unique_ptr<HostDeviceApi>(new HostDeviceApi(std::move(options)));
}

HostDeviceApi::~HostDeviceApi() {
  // Work still queued is dropped: nobody can observe it any more.
  for (const auto& [base, allocation] : allocations_) {
    ReleaseMemory(reinterpret_cast<void*>(base), allocation.bytes);
  }
  for (const auto& [base, bytes] : pinned_) {
    std::free(reinterpret_cast<void*>(base));
  }
}

Status HostDeviceApi::Log(std::string line, Status status) {
  if (!status.ok()) line += " refused: " + std::string(ErrorName(status));
  calls_.push_back(std::move(line));
  return status;
}

Status HostDeviceApi::CheckDevice(int device, std::string_view what) const {
  if (device >= 0 && device < options_.devices) return Status::OK();
  return Refuse("cudaErrorInvalidDevice",
                std::string(what) + " " + std::to_string(device) +
                    " is not one of the " + std::to_string(options_.devices) +
                    " emulated devices");
}

Result<HostDeviceApi::Stream*> HostDeviceApi::FindStream(StreamHandle stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    return Refuse("cudaErrorInvalidResourceHandle",
                  "stream " + std::to_string(stream) +
                      " is not a live stream of this HostDeviceApi (never "
                      "created, or destroyed)");
  }
  return &it->second;
}

HostDeviceApi::Location HostDeviceApi::Locate(const void* ptr) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  auto it = allocations_.upper_bound(address);
  if (it == allocations_.begin()) return {};
  --it;
  if (address - it->first >= it->second.bytes) return {};
  return {it->second.device, it->first, it->second.bytes};
}

bool HostDeviceApi::PeerListed(int device, int peer) const {
  for (const auto& [a, b] : options_.no_peer_access) {
    if ((a == device && b == peer) || (a == peer && b == device)) return true;
  }
  return false;
}

void HostDeviceApi::RunStream(Stream& stream, uint64_t position) {
  while (stream.done < position && !stream.work.empty()) {
    std::function<void()> work = std::move(stream.work.front());
    stream.work.pop_front();
    work();
    ++stream.done;
  }
}

Result<void*> HostDeviceApi::Malloc(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string line = "Malloc device=" + std::to_string(device) +
                           " bytes=" + std::to_string(bytes);
  Status st = CheckDevice(device, "device");
  if (!st.ok()) return Log(line, st);
  if (bytes == 0) {
    calls_.push_back(line);
    return static_cast<void*>(nullptr);
  }
  size_t& used = allocated_[static_cast<size_t>(device)];
  const size_t free_bytes =
      options_.memory_per_device - std::min(used, options_.memory_per_device);
  void* p = nullptr;
  if (bytes <= free_bytes && bytes <= SIZE_MAX - 255) {
    p = AllocateMemory(bytes);
  }
  if (p == nullptr) {
    return Log(line, Status::ResourceExhausted(
                         "cudaErrorMemoryAllocation: Malloc of " +
                         std::to_string(bytes) + " bytes on device " +
                         std::to_string(device) + " failed (" +
                         std::to_string(free_bytes) + " bytes free)"));
  }
  std::memset(p, 0xDB, bytes);
  used += bytes;
  allocations_[reinterpret_cast<uintptr_t>(p)] = {device, bytes};
  calls_.push_back(line);
  return p;
}

Status HostDeviceApi::Free(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ptr == nullptr) return Log("Free null", Status::OK());
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
  if (imports_.count(reinterpret_cast<uintptr_t>(ptr)) != 0) {
    return Log("Free", host_emulation::FreeOfImport());
  }
  if (it == allocations_.end()) {
    const Location at = Locate(ptr);
    const std::string where =
        at.device < 0
            ? "the pointer is not an allocation of this HostDeviceApi"
            : "the pointer lies " +
                  std::to_string(reinterpret_cast<uintptr_t>(ptr) - at.base) +
                  " bytes into an allocation of device " +
                  std::to_string(at.device) + ", not at its start";
    return Log("Free", Refuse("cudaErrorInvalidValue", "Free: " + where));
  }
  // cudaFree waits for the device: the work queued so far runs first.
  for (auto& [handle, stream] : streams_) RunStream(stream, stream.queued);
  const Allocation a = it->second;
  allocated_[static_cast<size_t>(a.device)] -= a.bytes;
  allocations_.erase(it);
  ReleaseMemory(ptr, a.bytes);
  return Log("Free device=" + std::to_string(a.device) +
                 " bytes=" + std::to_string(a.bytes),
             Status::OK());
}

Result<void*> HostDeviceApi::MallocHost(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string line = "MallocHost bytes=" + std::to_string(bytes);
  void* p = nullptr;
  if (bytes > 0 && bytes <= SIZE_MAX - 4095) {
    p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) {
      return Log(line, Status::ResourceExhausted(
                           "cudaErrorMemoryAllocation: MallocHost of " +
                           std::to_string(bytes) + " bytes failed"));
    }
    std::memset(p, 0xDB, bytes);
    pinned_[reinterpret_cast<uintptr_t>(p)] = bytes;
    counters_.pinned_bytes += bytes;
    counters_.pinned_peak =
        std::max(counters_.pinned_peak, counters_.pinned_bytes);
  }
  calls_.push_back(line);
  return p;
}

Status HostDeviceApi::FreeHost(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ptr == nullptr) return Log("FreeHost null", Status::OK());
  auto it = pinned_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == pinned_.end()) {
    return Log("FreeHost",
               Refuse("cudaErrorInvalidValue",
                      "FreeHost: the pointer is not one that MallocHost of "
                      "this HostDeviceApi returned (or it was freed)"));
  }
  // The work queued so far may still read or write it: it runs first.
  for (auto& [handle, stream] : streams_) RunStream(stream, stream.queued);
  const size_t bytes = it->second;
  pinned_.erase(it);
  counters_.pinned_bytes -= bytes;
  std::free(ptr);
  return Log("FreeHost bytes=" + std::to_string(bytes), Status::OK());
}

Result<int> HostDeviceApi::DeviceCount() { return options_.devices; }

std::string HostDeviceApi::RuntimeVersion() { return "emulated"; }

size_t HostDeviceApi::MaxPitch() { return options_.max_pitch; }

Result<PointerInfo> HostDeviceApi::Pointer(const void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  PointerInfo info;
  info.device = Locate(ptr).device;
  return info;
}

Result<StreamHandle> HostDeviceApi::CreateStream(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string line = "CreateStream device=" + std::to_string(device);
  Status st = CheckDevice(device, "device");
  if (!st.ok()) return Log(line, st);
  const StreamHandle handle = next_stream_++;
  streams_[handle].device = device;
  calls_.push_back(line + " -> stream=" + std::to_string(handle));
  return handle;
}

Status HostDeviceApi::DestroyStream(StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string line = "DestroyStream stream=" + std::to_string(stream);
  Result<Stream*> s = FindStream(stream);
  if (!s.ok()) return Log(line, s.status());
  // cudaStreamDestroy returns at once and the queued work still completes.
  RunStream(**s, (*s)->queued);
  streams_.erase(stream);
  return Log(line, Status::OK());
}

Result<EventHandle> HostDeviceApi::RecordEvent(StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string line = "RecordEvent stream=" + std::to_string(stream);
  Result<Stream*> s = FindStream(stream);
  if (!s.ok()) return Log(line, s.status());
  const EventHandle handle = next_event_++;
  events_[handle] = {stream, (*s)->queued, false};
  calls_.push_back(line + " -> event=" + std::to_string(handle));
  return handle;
}

namespace {

Status UnknownEvent(EventHandle event) {
  return Refuse("cudaErrorInvalidResourceHandle",
                "event " + std::to_string(event) +
                    " is not a live event of this HostDeviceApi (never "
                    "recorded, or destroyed)");
}

}  // namespace

Result<bool> HostDeviceApi::EventDone(EventHandle event) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string line = "EventDone event=" + std::to_string(event);
  auto it = events_.find(event);
  if (it == events_.end()) {
    return Log(line, UnknownEvent(event));
  }
  Event& e = it->second;
  auto s = streams_.find(e.stream);  // a destroyed stream ran all its work
  bool done = s == streams_.end() || s->second.done >= e.position;
  if (!done && e.asked) {
    RunStream(s->second, e.position);
    done = true;
  }
  e.asked = true;
  calls_.push_back(line + (done ? " -> true" : " -> false"));
  return done;
}

Status HostDeviceApi::DestroyEvent(EventHandle event) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string line = "DestroyEvent event=" + std::to_string(event);
  if (events_.erase(event) == 0) {
    return Log(line, UnknownEvent(event));
  }
  return Log(line, Status::OK());
}

Status HostDeviceApi::SynchronizeStream(StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string line = "Synchronize stream=" + std::to_string(stream);
  Result<Stream*> s = FindStream(stream);
  if (!s.ok()) return Log(line, s.status());
  RunStream(**s, (*s)->queued);
  return Log(line, Status::OK());
}

Result<bool> HostDeviceApi::CanAccessPeer(int device, int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  RESHARD_RETURN_NOT_OK(CheckDevice(device, "device"));
  RESHARD_RETURN_NOT_OK(CheckDevice(peer, "peer"));
  return device != peer && !PeerListed(device, peer);
}

Status HostDeviceApi::EnablePeerAccess(int device, int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string line = "EnablePeerAccess device=" + std::to_string(device) +
                           " peer=" + std::to_string(peer);
  Status st = CheckDevice(device, "device");
  if (st.ok()) st = CheckDevice(peer, "peer");
  if (st.ok() && device == peer) {
    st = Refuse("cudaErrorInvalidDevice",
                "device " + std::to_string(device) +
                    " cannot enable peer access to itself");
  }
  if (st.ok() && PeerListed(device, peer)) {
    st = Status::FailedPrecondition("cudaErrorPeerAccessUnsupported: devices " +
                                    std::to_string(device) + " and " +
                                    std::to_string(peer) +
                                    " cannot access each other's memory "
                                    "(HostDeviceApiOptions::no_peer_access)");
  }
  if (st.ok()) peer_enabled_.insert({device, peer});
  return Log(line, st);
}

Status HostDeviceApi::CheckPeer(StreamHandle handle, const Stream& stream,
                                int device, std::string_view touches) const {
  if (device < 0 || device == stream.device ||
      peer_enabled_.count({stream.device, device}) != 0) {
    return Status::OK();
  }
  const std::string from = std::to_string(stream.device);
  const std::string to = std::to_string(device);
  return Status::FailedPrecondition(
      "cudaErrorPeerAccessNotEnabled: stream " + std::to_string(handle) +
      " of device " + from + " " + std::string(touches) +
      ", memory of device " + to + ", without peer access from device " + from +
      " to device " + to);
}

// Where a side lies against what the kind says. Stricter than the
// runtime: under unified addressing it may carry out a copy whose kind
// contradicts the pointers, but CUDA documents such a copy as undefined,
// so it is refused here.
Status HostDeviceApi::CheckSideMemory(StreamHandle handle, const Stream& stream,
                                      const Side& side, bool want_device,
                                      CopyKind kind, bool src) {
  const Location at = Locate(side.ptr);
  const std::string name(side.ptr_name);
  if ((at.device >= 0) != want_device) {
    return Refuse(
        "cudaErrorInvalidMemcpyDirection",
        "kind " + KindText(kind) + " but " + name + " is " +
            (at.device < 0 ? std::string("host memory")
                           : "memory of device " + std::to_string(at.device)));
  }
  if (at.device < 0) return Status::OK();
  const size_t left =
      at.bytes - (reinterpret_cast<uintptr_t>(side.ptr) - at.base);
  if (side.end > left) {
    return Refuse("cudaErrorInvalidValue",
                  "the copy reaches " + std::to_string(side.end) +
                      " bytes past " + name +
                      ", beyond the end of its allocation on device " +
                      std::to_string(at.device) + " (" + std::to_string(left) +
                      " bytes past " + name + ")");
  }
  // Stricter than the runtime, which stages a copy between devices
  // without peer access through the host: work on a stream touches
  // another device's memory only with peer access, as a kernel must.
  return CheckPeer(handle, stream, at.device,
                   (src ? "copies from " : "copies to ") + name);
}

Status HostDeviceApi::CheckCopySides(StreamHandle handle, const Stream& stream,
                                     CopyKind kind, const Side& src,
                                     const Side& dst, size_t width,
                                     size_t height, size_t depth) {
  bool src_device = Locate(src.ptr).device >= 0;
  bool dst_device = Locate(dst.ptr).device >= 0;
  if (kind != CopyKind::kDefault) {
    src_device =
        kind == CopyKind::kDeviceToHost || kind == CopyKind::kDeviceToDevice;
    dst_device =
        kind == CopyKind::kHostToDevice || kind == CopyKind::kDeviceToDevice;
  }
  RESHARD_RETURN_NOT_OK(
      CheckSideMemory(handle, stream, src, src_device, kind, true));
  RESHARD_RETURN_NOT_OK(
      CheckSideMemory(handle, stream, dst, dst_device, kind, false));
  return CheckOverlap(src, dst, width, height, depth);
}

void HostDeviceApi::QueueCopy(Stream& stream, const Side& src, const Side& dst,
                              size_t width, size_t height, size_t depth) {
  const uint8_t* from = src.ptr + src.first;
  uint8_t* to = const_cast<uint8_t*>(dst.ptr) + dst.first;
  const size_t sp = src.pitch, dp = dst.pitch;
  // Slices apart only in a copy of several (ComputeSpan checked these).
  const size_t ss = depth > 1 ? src.pitch * src.ysize : 0;
  const size_t ds = depth > 1 ? dst.pitch * dst.ysize : 0;
  stream.work.push_back([=, this] {
    for (size_t z = 0; z < depth; ++z) {
      for (size_t y = 0; y < height; ++y) {
        std::memcpy(to + z * ds + y * dp, from + z * ss + y * sp, width);
      }
    }
    ++counters_.copies_run;
    counters_.bytes_copied += width * height * depth;
  });
  ++stream.queued;
}

Status HostDeviceApi::Copy3DLocked(const Copy3D& copy, StreamHandle handle) {
  RESHARD_ASSIGN_OR_RETURN(Stream * stream, FindStream(handle));
  RESHARD_RETURN_NOT_OK(CheckKind(copy.kind));
  const Extent& e = copy.extent;
  if (e.width == 0 || e.height == 0 || e.depth == 0) return Status::OK();
  Side src = Side3D(copy.src, copy.src_pos, true);
  Side dst = Side3D(copy.dst, copy.dst_pos, false);
  RESHARD_RETURN_NOT_OK(CheckShape3D(src, e, options_.max_pitch));
  RESHARD_RETURN_NOT_OK(CheckShape3D(dst, e, options_.max_pitch));
  RESHARD_RETURN_NOT_OK(ComputeSpan(&src, e, k3DExtent));
  RESHARD_RETURN_NOT_OK(ComputeSpan(&dst, e, k3DExtent));
  RESHARD_RETURN_NOT_OK(CheckCopySides(handle, *stream, copy.kind, src, dst,
                                       e.width, e.height, e.depth));
  QueueCopy(*stream, src, dst, e.width, e.height, e.depth);
  return Status::OK();
}

Status HostDeviceApi::Copy3DAsync(const Copy3D& copy, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const Extent& e = copy.extent;
  return Log("Copy3DAsync stream=" + std::to_string(stream) + " kind=" +
                 KindText(copy.kind) + " extent=" + std::to_string(e.width) +
                 "x" + std::to_string(e.height) + "x" + std::to_string(e.depth),
             Copy3DLocked(copy, stream));
}

Status HostDeviceApi::Copy2DLocked(void* dst, size_t dpitch, const void* src,
                                   size_t spitch, size_t width, size_t height,
                                   CopyKind kind, StreamHandle handle) {
  RESHARD_ASSIGN_OR_RETURN(Stream * stream, FindStream(handle));
  RESHARD_RETURN_NOT_OK(CheckKind(kind));
  if (width == 0 || height == 0) return Status::OK();
  if (src == nullptr) return Refuse("cudaErrorInvalidValue", "src is null");
  if (dst == nullptr) return Refuse("cudaErrorInvalidValue", "dst is null");
  RESHARD_RETURN_NOT_OK(CheckMaxPitch("spitch", spitch, options_.max_pitch));
  RESHARD_RETURN_NOT_OK(CheckMaxPitch("dpitch", dpitch, options_.max_pitch));
  for (const auto& [name, pitch] :
       {std::pair<const char*, size_t>{"spitch", spitch}, {"dpitch", dpitch}}) {
    if (width > pitch) {
      return Refuse("cudaErrorInvalidPitchValue",
                    Named("width", width) + " exceeds " + Named(name, pitch));
    }
  }
  Side s = Side2D(src, spitch, height, true);
  Side d = Side2D(dst, dpitch, height, false);
  const Extent e{width, height, 1};
  RESHARD_RETURN_NOT_OK(ComputeSpan(&s, e, k2DExtent));
  RESHARD_RETURN_NOT_OK(ComputeSpan(&d, e, k2DExtent));
  RESHARD_RETURN_NOT_OK(
      CheckCopySides(handle, *stream, kind, s, d, width, height, 1));
  QueueCopy(*stream, s, d, width, height, 1);
  return Status::OK();
}

Status HostDeviceApi::Copy2DAsync(void* dst, size_t dpitch, const void* src,
                                  size_t spitch, size_t width, size_t height,
                                  CopyKind kind, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return Log(
      "Copy2DAsync stream=" + std::to_string(stream) +
          " kind=" + KindText(kind) + " width=" + std::to_string(width) +
          " height=" + std::to_string(height),
      Copy2DLocked(dst, dpitch, src, spitch, width, height, kind, stream));
}

// One side of a launch: every row inside the allocation when on a device.
// Row 0 starts at offset 0 and the last row (every index at its count - 1)
// reaches furthest, strides being unsigned, so the span of the rows is
// [0, inner_bytes + sum of (counts[i] - 1) * strides[i]).
Status HostDeviceApi::CheckKernelSide(StreamHandle handle, const Stream& stream,
                                      const GatherScatterArgs& a, bool src) {
  const std::string name = src ? "src" : "dst";
  const uint8_t* ptr = src ? a.src : a.dst;
  const uint64_t* strides = src ? a.src_strides : a.dst_strides;
  if (ptr == nullptr) return Refuse("cudaErrorInvalidValue", name + " is null");
  uint64_t end = a.inner_bytes;
  for (uint32_t i = 0; i < a.loops; ++i) {
    const std::string index = "[" + std::to_string(i) + "]";
    uint64_t term = 0;
    if (!Mul(a.counts[i] - 1, strides[i], &term)) {
      return Overflow("(" + Named("counts" + index, a.counts[i]) + " - 1) * " +
                          Named(name + "_strides" + index, strides[i]),
                      "uint64");
    }
    if (!Add(end, term, &end)) {
      return Overflow("the offset of the end of " + name + "'s last row",
                      "uint64");
    }
  }
  uintptr_t last = 0;
  if (!Add(reinterpret_cast<uintptr_t>(ptr), end, &last)) {
    return Overflow(
        name + " + " + std::to_string(end) + " (the end of its last row)",
        "the address space");
  }
  const Location at = Locate(ptr);
  if (at.device < 0) return Status::OK();
  const size_t left = at.bytes - (reinterpret_cast<uintptr_t>(ptr) - at.base);
  if (end > left) {
    return Refuse("cudaErrorInvalidValue",
                  "the kernel's rows reach " + std::to_string(end) +
                      " bytes past " + name +
                      ", beyond the end of its allocation on device " +
                      std::to_string(at.device) + " (" + std::to_string(left) +
                      " bytes past " + name + ")");
  }
  return CheckPeer(handle, stream, at.device,
                   "runs the gather/scatter kernel on " + name);
}

Status HostDeviceApi::LaunchLocked(const GatherScatterArgs& a,
                                   StreamHandle handle) {
  RESHARD_ASSIGN_OR_RETURN(Stream * stream, FindStream(handle));
  if (a.loops > kMaxLoops) {
    return Refuse("cudaErrorInvalidValue", Named("loops", a.loops) +
                                               " exceeds kMaxLoops " +
                                               std::to_string(kMaxLoops));
  }
  uint64_t product = 1;
  for (uint32_t i = 0; i < a.loops; ++i) {
    if (!Mul(product, a.counts[i], &product)) {
      return Overflow("the product of the counts", "uint64");
    }
  }
  if (product != a.rows) {
    return Refuse("cudaErrorInvalidValue",
                  Named("rows", a.rows) +
                      " is not the product of the counts, " +
                      std::to_string(product));
  }
  // A launch without bytes to move touches no memory.
  if (a.rows > 0 && a.inner_bytes > 0) {
    RESHARD_RETURN_NOT_OK(CheckKernelSide(handle, *stream, a, true));
    RESHARD_RETURN_NOT_OK(CheckKernelSide(handle, *stream, a, false));
  }
  const uint64_t blocks = GatherScatterBlocks(a);
  stream->work.push_back([a, blocks, this] {
    // The grid the GPU runs, block by block and thread by thread.
    for (uint64_t block = 0; block < blocks; ++block) {
      for (uint32_t t = 0; t < kGatherScatterThreads; ++t) {
        GatherScatterThread(a, block, blocks, t, kGatherScatterThreads);
      }
    }
    ++counters_.kernels_run;
    counters_.kernel_bytes += a.rows * a.inner_bytes;
  });
  ++stream->queued;
  return Status::OK();
}

Status HostDeviceApi::LaunchGatherScatter(const GatherScatterArgs& args,
                                          StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return Log("LaunchGatherScatter stream=" + std::to_string(stream) +
                 " rows=" + std::to_string(args.rows) +
                 " blocks=" + std::to_string(GatherScatterBlocks(args)),
             LaunchLocked(args, stream));
}

std::vector<std::string> HostDeviceApi::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

HostDeviceApiCounters HostDeviceApi::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace reshard::cuda
