// HostDeviceApi: the device API (device_api.h) emulated over host memory,
// so that everything above the seam is tested without a GPU.
//
// Emulated device memory is host memory that Malloc tracks as an
// allocation of a device; Pointer() reports the device of the allocation
// holding an address and host (-1) for any other address.
//
// Work queued on a stream (Copy3DAsync, Copy2DAsync, LaunchGatherScatter)
// runs in order, and only when the caller synchronises: SynchronizeStream
// runs all of the stream's work; EventDone answers false the first time it
// is asked about unfinished work, then runs the stream's work up to the
// event and answers true; DestroyStream runs the stream's work first
// (cudaStreamDestroy returns at once and the work still completes); Free
// runs every stream's work first (cudaFree synchronises the device). A
// caller that never waits sees no bytes move.
//
// Arguments are checked at the call, as strictly as the CUDA runtime
// documents and in places more strictly (each place says so); a refusal
// queues nothing and its message starts with the CUDA error it stands for
// ("cudaErrorInvalidValue: srcPtr.ptr is null").
//
// Every method may be called from any thread; one mutex guards the state,
// and queued work runs while it is held.
#ifndef RESHARD_EXEC_CUDA_HOST_DEVICE_API_H_
#define RESHARD_EXEC_CUDA_HOST_DEVICE_API_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exec_cuda/device_api.h"

namespace reshard::cuda {

namespace host_emulation {
struct CopySide;  // one side of a copy, checked (host_device_api.cc)
// Free's refusal of memory IpcOpenMemHandle mapped (host_device_ipc.cc).
Status FreeOfImport();
// The emulation's refusals: InvalidArgument "<error>: <detail>", `error`
// the cudaError_t the runtime returns.
inline Status Refuse(std::string_view error, const std::string& detail) {
  return Status::InvalidArgument(std::string(error) + ": " + detail);
}
}  // namespace host_emulation

struct HostDeviceApiOptions {
  // Emulated devices, ordinals 0 .. devices - 1 (a negative count is 0).
  int devices = 1;
  // MaxPitch(): cudaDevAttrMaxPitch, the largest pitch a copy may have.
  size_t max_pitch = 2147483647;
  // Device pairs without peer access (either order); every other pair of
  // distinct devices can access each other. Pairs naming no device have
  // no effect.
  std::vector<std::pair<int, int>> no_peer_access;
  // Bytes that Malloc may hold per device (cudaErrorMemoryAllocation
  // beyond).
  size_t memory_per_device = SIZE_MAX;
  // Whether Malloc's memory can be exported with IpcGetMemHandle and
  // opened by another process (host_device_ipc.cc): each allocation is
  // then a memfd mapped shared, page-aligned. Without it allocations are
  // private memory and IpcGetMemHandle is refused (cudaErrorNotSupported,
  // as on a device without IPC support).
  bool ipc_shareable = false;
};

// What the emulation has run so far (work that ran, not work queued).
struct HostDeviceApiCounters {
  uint64_t copies_run = 0;    // Copy3DAsync and Copy2DAsync copies
  uint64_t bytes_copied = 0;  // by those copies
  uint64_t kernels_run = 0;   // gather/scatter launches
  uint64_t kernel_bytes = 0;  // rows * inner_bytes of those launches
  uint64_t pinned_bytes = 0;  // MallocHost bytes held now
  uint64_t pinned_peak = 0;   // the most MallocHost bytes held at once
};

class HostDeviceApi final : public DeviceApi {
 public:
  static std::unique_ptr<HostDeviceApi> Make(HostDeviceApiOptions options);
  ~HostDeviceApi() override;

  HostDeviceApi(const HostDeviceApi&) = delete;
  HostDeviceApi& operator=(const HostDeviceApi&) = delete;

  // cudaMalloc on `device`: 256-byte aligned memory whose bytes read 0xDB
  // until written (cudaMalloc leaves them unspecified). Zero bytes give a
  // null pointer, as cudaMalloc does.
  Result<void*> Malloc(int device, size_t bytes) override;
  // cudaFree: runs every stream's queued work first, then releases `ptr`,
  // which must be a pointer Malloc returned (null is a no-op).
  Status Free(void* ptr) override;
  // cudaMallocHost: 4096-byte aligned host memory whose bytes read 0xDB
  // until written; Pointer() reports it as host memory (-1). FreeHost runs
  // every stream's queued work first (as Free does), then releases `ptr`,
  // which must be a pointer MallocHost returned (null is a no-op).
  Result<void*> MallocHost(size_t bytes) override;
  Status FreeHost(void* ptr) override;

  Result<int> DeviceCount() override;
  std::string RuntimeVersion() override;  // "emulated"
  Result<PointerInfo> Pointer(const void* ptr) override;

  Result<StreamHandle> CreateStream(int device) override;
  Status DestroyStream(StreamHandle stream) override;
  Result<EventHandle> RecordEvent(StreamHandle stream) override;
  Result<bool> EventDone(EventHandle event) override;
  Status DestroyEvent(EventHandle event) override;
  Status SynchronizeStream(StreamHandle stream) override;

  Status Copy3DAsync(const Copy3D& copy, StreamHandle stream) override;
  Status Copy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                     size_t width, size_t height, CopyKind kind,
                     StreamHandle stream) override;

  // A device cannot access itself (as cudaDeviceCanAccessPeer says);
  // distinct devices can unless options.no_peer_access lists the pair.
  // EnablePeerAccess(device, peer) lets work on streams of `device`
  // touch memory of `peer`.
  Result<bool> CanAccessPeer(int device, int peer) override;
  Status EnablePeerAccess(int device, int peer) override;

  Status LaunchGatherScatter(const GatherScatterArgs& args,
                             StreamHandle stream) override;

  // The FP8 and delta kernels (host_device_api_convert.cc): arguments
  // checked as DeviceApi states, then every phase queued as one piece of
  // the stream's work that runs the kernel's grid block by block and
  // thread by thread. Every pointer range a launch touches must lie within
  // its allocation where it is device memory (cudaErrorInvalidValue, the
  // GPU would fault), and device memory of another device needs peer
  // access (cudaErrorPeerAccessNotEnabled). Logged as "LaunchCast stream=1
  // elements=65536", "LaunchQuantizeE4m3 stream=1 rows=4 cols=8",
  // "LaunchDequantizeE4m3 stream=1 rows=4 cols=8", "LaunchDeltaEncode
  // stream=1 elements=100 item=2", "LaunchDeltaApply stream=1 elements=100
  // item=2".
  Status LaunchCast(const CastArgs& args, StreamHandle stream) override;
  Status LaunchQuantizeE4m3(const QuantizeArgs& args,
                            StreamHandle stream) override;
  Status LaunchDequantizeE4m3(const DequantizeArgs& args,
                              StreamHandle stream) override;
  Status LaunchDeltaEncode(const DeltaArgs& args, StreamHandle stream) override;
  Status LaunchDeltaApply(const DeltaArgs& args, StreamHandle stream) override;

  size_t MaxPitch() override;

  // CUDA IPC over real shared memory (host_device_ipc.cc), between
  // processes that each have a HostDeviceApi. A handle names a shared
  // allocation by the exporting process's id, its descriptor and a serial
  // number, so another process opens exactly that memory (through
  // /proc/<pid>/fd) or is refused. As the runtime documents:
  //  - IpcGetMemHandle takes the base of an allocation Malloc made
  //    (cudaErrorInvalidValue for any other pointer, an interior one
  //    included, and for memory IpcOpenMemHandle mapped);
  //  - IpcOpenMemHandle refuses a handle that is not one
  //    (cudaErrorInvalidValue), one exported by this process
  //    (cudaErrorDeviceUninitialized, "invalid device context"), one whose
  //    allocation was freed or whose process exited
  //    (cudaErrorInvalidResourceHandle); opening a handle open already
  //    returns the same pointer and counts a reference. The memory is
  //    device memory of `device` here (Pointer(), copies), and Free of it
  //    is refused (cudaErrorInvalidValue: it is closed, not freed);
  //  - IpcCloseMemHandle of a pointer not open (never opened, closed, or
  //    an interior pointer) is cudaErrorInvalidValue; the last close runs
  //    every stream's queued work first (it may touch the memory), then
  //    unmaps. The exporter's memory is unaffected.
  // Logged as "IpcGetMemHandle device=0 bytes=4096", "IpcOpenMemHandle
  // device=0 bytes=4096 -> refs=1", "IpcCloseMemHandle bytes=4096 ->
  // refs=0".
  Result<AllocationRange> AllocationOf(const void* ptr) override;
  Result<IpcMemHandle> IpcGetMemHandle(void* base) override;
  Result<void*> IpcOpenMemHandle(int device,
                                 const IpcMemHandle& handle) override;
  Status IpcCloseMemHandle(void* ptr) override;

  // One line per call that changes state or polls it, in call order
  // (queries such as Pointer, CanAccessPeer and DeviceCount are not
  // logged); a refused call ends with " refused: <CUDA error>". E.g.
  //   "CreateStream device=0 -> stream=1"
  //   "Copy3DAsync stream=1 kind=DeviceToDevice extent=64x8x2"
  //   "Copy2DAsync stream=1 kind=HostToDevice width=64 height=8"
  //   "LaunchGatherScatter stream=2 rows=12 blocks=12"
  //   "RecordEvent stream=1 -> event=1", "EventDone event=1 -> false"
  //   "Synchronize stream=1", "DestroyEvent event=1", "DestroyStream
  //   stream=1", "EnablePeerAccess device=0 peer=1", "Malloc device=0
  //   bytes=4096", "Free device=0 bytes=4096", "MallocHost bytes=4096",
  //   "FreeHost bytes=4096"
  std::vector<std::string> calls() const;
  HostDeviceApiCounters counters() const;

 private:
  using Side = host_emulation::CopySide;

  struct Allocation {
    int device;
    size_t bytes;
  };
  struct Stream {
    int device;
    std::deque<std::function<void()>> work;
    uint64_t queued = 0;  // work ever queued
    uint64_t done = 0;    // work run
  };
  struct Event {
    StreamHandle stream;
    uint64_t position;  // the stream's `queued` when recorded
    bool asked = false;
  };
  // Where an address lies: the allocation holding it, if any.
  struct Location {
    int device = -1;
    uintptr_t base = 0;
    size_t bytes = 0;
  };

  // A shared allocation (ipc_shareable): its memfd and serial number.
  struct Shared {
    int fd;
    uint64_t serial;
  };
  // Memory IpcOpenMemHandle mapped: whose, and the references to it.
  struct Import {
    int32_t pid;
    uint64_t serial;
    uint64_t refs;
  };

  explicit HostDeviceApi(HostDeviceApiOptions options);

  // Malloc's memory: private (aligned_alloc) or, with ipc_shareable, a
  // shared memfd mapping recorded in shared_; null on failure. Release
  // gives back either, or an import's mapping. Called with mu_ held.
  void* AllocateMemory(size_t bytes);
  void ReleaseMemory(void* ptr, size_t bytes);

  Status CheckDevice(int device, std::string_view what) const;
  Result<Stream*> FindStream(StreamHandle stream);
  Location Locate(const void* ptr) const;
  bool PeerListed(int device, int peer) const;
  void RunStream(Stream& stream, uint64_t position);
  // Appends `line` (with the refusal, if `status` is one) to the log.
  Status Log(std::string line, Status status);

  Status CheckCopySides(StreamHandle handle, const Stream& stream,
                        CopyKind kind, const Side& src, const Side& dst,
                        size_t width, size_t height, size_t depth);
  Status CheckSideMemory(StreamHandle handle, const Stream& stream,
                         const Side& side, bool want_device, CopyKind kind,
                         bool src);
  Status CheckPeer(StreamHandle handle, const Stream& stream, int device,
                   std::string_view touches) const;
  void QueueCopy(Stream& stream, const Side& src, const Side& dst, size_t width,
                 size_t height, size_t depth);
  Status CheckKernelSide(StreamHandle handle, const Stream& stream,
                         const GatherScatterArgs& args, bool src);
  Status Copy3DLocked(const Copy3D& copy, StreamHandle handle);
  Status Copy2DLocked(void* dst, size_t dpitch, const void* src, size_t spitch,
                      size_t width, size_t height, CopyKind kind,
                      StreamHandle handle);
  Status LaunchLocked(const GatherScatterArgs& args, StreamHandle handle);
  // The FP8 and delta kernels (host_device_api_convert.cc). A range a
  // launch touches: `bytes` at `ptr`, named `name` in messages.
  struct KernelRange {
    const void* ptr;
    uint64_t bytes;
    std::string_view name;
  };
  // Each range checked, in order, as a launch of `kernel` touches it.
  Status CheckKernelRanges(StreamHandle handle, const Stream& stream,
                           std::string_view kernel,
                           std::initializer_list<KernelRange> ranges);
  Status CheckKernelRange(StreamHandle handle, const Stream& stream,
                          const KernelRange& range, std::string_view kernel);
  // Under mu_: `check(stream)` on the launch's stream (which checks the
  // arguments and queues the work), logged as `line`.
  template <typename Check>
  Status LaunchKernel(StreamHandle handle, const std::string& line,
                      const Check& check);
  Status QueueKernel(Stream* stream, std::function<void()> work);

  const HostDeviceApiOptions options_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Allocation> allocations_;  // by base address
  std::vector<size_t> allocated_;                // bytes per device
  std::map<uintptr_t, size_t> pinned_;           // MallocHost: base, bytes
  std::map<uintptr_t, Shared> shared_;           // exportable allocations
  std::map<uintptr_t, Import> imports_;  // opened handles (in allocations_)
  std::map<StreamHandle, Stream> streams_;
  std::map<EventHandle, Event> events_;
  std::set<std::pair<int, int>> peer_enabled_;  // (device, peer)
  StreamHandle next_stream_ = 1;
  EventHandle next_event_ = 1;
  std::vector<std::string> calls_;
  HostDeviceApiCounters counters_;
};

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_HOST_DEVICE_API_H_
