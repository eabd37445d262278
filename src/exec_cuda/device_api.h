// The device-API seam of the CUDA executor: the few CUDA runtime calls it
// makes (streams, events, 2D/3D asynchronous copies between host and
// device pointers, pinned host memory, peer access, the gather/scatter
// kernel, CUDA IPC handles), as an interface with two implementations:
//  - CudaRuntimeApi (cuda_runtime_api.h, built where the CUDA toolkit is),
//    which calls the CUDA runtime;
//  - HostDeviceApi (host_device_api.h), an emulation over host memory that
//    carries out the same copy semantics, checks arguments as strictly as
//    the runtime documents, runs each stream's work in order only when the
//    caller synchronises, and records the call sequence.
// Everything above the seam is ordinary C++, tested here through the
// emulation.
//
// Copies follow cudaMemcpy3D on linear memory (no CUDA arrays): a pitched
// pointer is `ptr`, `pitch` bytes per row and `ysize` rows per slice, so
// element (x, y, z) is at ptr + z * pitch * ysize + y * pitch + x; the
// extent and the positions count bytes (the element of a pointer is
// unsigned char).
#ifndef RESHARD_EXEC_CUDA_DEVICE_API_H_
#define RESHARD_EXEC_CUDA_DEVICE_API_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "exec_cuda/convert_kernels.h"
#include "exec_cuda/gather_scatter.h"
#include "reshard/status.h"

namespace reshard::cuda {

// cudaMemcpyKind's values.
enum class CopyKind : uint8_t {
  kHostToHost = 0,
  kHostToDevice = 1,
  kDeviceToHost = 2,
  kDeviceToDevice = 3,
  kDefault = 4,  // inferred from the pointers (unified addressing)
};

std::string_view CopyKindName(CopyKind kind);

struct PitchedPtr {  // cudaPitchedPtr
  void* ptr = nullptr;
  size_t pitch = 0;  // bytes per row
  size_t xsize = 0;  // logical width (bytes); not used by copies
  size_t ysize = 0;  // rows per slice
};

struct Pos {  // cudaPos, in bytes (x) and rows (y, z)
  size_t x = 0, y = 0, z = 0;
};

struct Extent {  // cudaExtent: width in bytes, height rows, depth slices
  size_t width = 0, height = 0, depth = 0;
};

struct Copy3D {  // cudaMemcpy3DParms without arrays
  PitchedPtr src;
  Pos src_pos;
  PitchedPtr dst;
  Pos dst_pos;
  Extent extent;
  CopyKind kind = CopyKind::kDefault;
};

// Where a pointer lies (cudaPointerGetAttributes): host memory (device
// -1), or memory of device `device`.
struct PointerInfo {
  int device = -1;
  bool on_device() const { return device >= 0; }
};

// cudaIpcMemHandle_t: 64 opaque bytes that name a device allocation to
// another process (CUDA IPC between processes of one host).
struct IpcMemHandle {
  uint8_t bytes[64] = {};
};

// A device allocation: its base and size (cuMemGetAddressRange).
struct AllocationRange {
  void* base = nullptr;
  size_t bytes = 0;
};

using StreamHandle = uint64_t;  // 0 is never a stream
using EventHandle = uint64_t;   // 0 is never an event

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;

  // Devices visible; 0 where there are none (never an error for that).
  virtual Result<int> DeviceCount() = 0;
  // "13.0" for the runtime's version (CUDA's major.minor).
  virtual std::string RuntimeVersion() = 0;
  virtual Result<PointerInfo> Pointer(const void* ptr) = 0;

  // cudaMalloc on `device` (null for 0 bytes) and cudaFree (null: no-op).
  virtual Result<void*> Malloc(int device, size_t bytes) = 0;
  virtual Status Free(void* ptr) = 0;
  // cudaMallocHost: page-locked (pinned) host memory, which Pointer()
  // reports as host memory and copies reach at the bus's full speed (null
  // for 0 bytes); cudaFreeHost (null: no-op) of a pointer MallocHost
  // returned, refused for any other.
  virtual Result<void*> MallocHost(size_t bytes) = 0;
  virtual Status FreeHost(void* ptr) = 0;

  virtual Result<StreamHandle> CreateStream(int device) = 0;
  virtual Status DestroyStream(StreamHandle stream) = 0;
  virtual Result<EventHandle> RecordEvent(StreamHandle stream) = 0;
  // True once the work before the event finished (cudaEventQuery).
  virtual Result<bool> EventDone(EventHandle event) = 0;
  virtual Status DestroyEvent(EventHandle event) = 0;
  // Waits for the stream's work; the first error of that work, if any.
  virtual Status SynchronizeStream(StreamHandle stream) = 0;

  // cudaMemcpy3DAsync / cudaMemcpy2DAsync on `stream`. Refused at once
  // (nothing queued) for arguments the runtime refuses.
  virtual Status Copy3DAsync(const Copy3D& copy, StreamHandle stream) = 0;
  virtual Status Copy2DAsync(void* dst, size_t dpitch, const void* src,
                             size_t spitch, size_t width, size_t height,
                             CopyKind kind, StreamHandle stream) = 0;

  // cudaDeviceCanAccessPeer and cudaDeviceEnablePeerAccess (enabling an
  // enabled pair is not an error here).
  virtual Result<bool> CanAccessPeer(int device, int peer) = 0;
  virtual Status EnablePeerAccess(int device, int peer) = 0;

  // The FP8 and delta kernels (convert_kernels.h) on `stream`, every
  // phase in order; the pointers are device memory of the stream's device
  // (or of a peer with access enabled) or host memory the device reaches.
  // Refused at once (nothing queued) for arguments the kernels cannot run:
  // a null pointer, a zero block, a row stride below the row, a quantized
  // source that is not float32/bfloat16/float16, a zero itemsize, sizes
  // whose products overflow. Casts (CastElements), block quantization with
  // scales (QuantizeE4m3Blocks; args.workspace holds
  // QuantizeWorkspaceWords), dequantization (DequantizeE4m3Blocks), and the
  // delta's kBitmap form: encode (map, values, base updated) and apply
  // (args.tile_counts holds DeltaWorkspaceWords).
  virtual Status LaunchCast(const CastArgs& args, StreamHandle stream) = 0;
  virtual Status LaunchQuantizeE4m3(const QuantizeArgs& args,
                                    StreamHandle stream) = 0;
  virtual Status LaunchDequantizeE4m3(const DequantizeArgs& args,
                                      StreamHandle stream) = 0;
  virtual Status LaunchDeltaEncode(const DeltaArgs& args,
                                   StreamHandle stream) = 0;
  virtual Status LaunchDeltaApply(const DeltaArgs& args,
                                  StreamHandle stream) = 0;

  // The gather/scatter kernel (gather_scatter.h) on `stream`: every row
  // of `args`, GatherScatterBlocks blocks of kGatherScatterThreads.
  virtual Status LaunchGatherScatter(const GatherScatterArgs& args,
                                     StreamHandle stream) = 0;

  // CUDA IPC. AllocationOf: the device allocation holding `ptr`
  // (cuMemGetAddressRange), refused for a pointer into none.
  // IpcGetMemHandle: cudaIpcGetMemHandle of the base of an allocation
  // Malloc made. IpcOpenMemHandle: cudaIpcOpenMemHandle on `device` (with
  // cudaIpcMemLazyEnablePeerAccess) of a handle another process exported;
  // opening one handle again in this process returns the same pointer and
  // counts a reference. IpcCloseMemHandle: cudaIpcCloseMemHandle of a
  // pointer IpcOpenMemHandle returned: drops a reference, unmaps at the
  // last.
  virtual Result<AllocationRange> AllocationOf(const void* ptr) = 0;
  virtual Result<IpcMemHandle> IpcGetMemHandle(void* base) = 0;
  virtual Result<void*> IpcOpenMemHandle(int device,
                                         const IpcMemHandle& handle) = 0;
  virtual Status IpcCloseMemHandle(void* ptr) = 0;

  // The largest pitch a copy may have (cudaDevAttrMaxPitch).
  virtual size_t MaxPitch() = 0;
};

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_DEVICE_API_H_
