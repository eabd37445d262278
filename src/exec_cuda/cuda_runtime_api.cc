// The DeviceApi over the CUDA runtime (RESHARD_CUDA builds). Handles are
// the runtime's cudaStream_t and cudaEvent_t; a stream is created on its
// device (cudaSetDevice first, on the calling thread). Errors name the
// call and the runtime's error string.
#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "exec_cuda/convert_kernel_launch.h"
#include "exec_cuda/cuda_transport.h"
#include "exec_cuda/device_api.h"
#include "exec_cuda/gather_scatter_kernel.h"

namespace reshard::cuda {

namespace {

Status Check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return Status::OK();
  return Status::Internal(std::string(call) + ": " + cudaGetErrorName(e) +
                          " (" + cudaGetErrorString(e) + ")");
}

cudaMemcpyKind ToCuda(CopyKind kind) {
  return static_cast<cudaMemcpyKind>(static_cast<int>(kind));
}

cudaStream_t S(StreamHandle h) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(h));
}
// A stream handle as the kernel launchers take it.
void* V(StreamHandle h) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(h));
}
cudaEvent_t E(EventHandle h) {
  return reinterpret_cast<cudaEvent_t>(static_cast<uintptr_t>(h));
}

class CudaRuntimeApi final : public DeviceApi {
 public:
  Result<int> DeviceCount() override {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    // No driver or no device is "none", not an error.
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
      (void)cudaGetLastError();
      return 0;
    }
    RESHARD_RETURN_NOT_OK(Check(e, "cudaGetDeviceCount"));
    return n;
  }

  std::string RuntimeVersion() override {
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "";
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
  }

  Result<PointerInfo> Pointer(const void* ptr) override {
    cudaPointerAttributes a{};
    RESHARD_RETURN_NOT_OK(
        Check(cudaPointerGetAttributes(&a, ptr), "cudaPointerGetAttributes"));
    PointerInfo info;
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
      info.device = a.device;
    }
    return info;
  }

  Result<void*> Malloc(int device, size_t bytes) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    RESHARD_RETURN_NOT_OK(Check(cudaSetDevice(device), "cudaSetDevice"));
    void* p = nullptr;
    RESHARD_RETURN_NOT_OK(Check(cudaMalloc(&p, bytes), "cudaMalloc"));
    return p;
  }

  Status Free(void* ptr) override { return Check(cudaFree(ptr), "cudaFree"); }

  Result<void*> MallocHost(size_t bytes) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    void* p = nullptr;
    RESHARD_RETURN_NOT_OK(Check(cudaMallocHost(&p, bytes), "cudaMallocHost"));
    return p;
  }

  Status FreeHost(void* ptr) override {
    return Check(cudaFreeHost(ptr), "cudaFreeHost");
  }

  Result<StreamHandle> CreateStream(int device) override {
    RESHARD_RETURN_NOT_OK(Check(cudaSetDevice(device), "cudaSetDevice"));
    cudaStream_t s = nullptr;
    RESHARD_RETURN_NOT_OK(
        Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags"));
    return static_cast<StreamHandle>(reinterpret_cast<uintptr_t>(s));
  }

  Status DestroyStream(StreamHandle stream) override {
    return Check(cudaStreamDestroy(S(stream)), "cudaStreamDestroy");
  }

  Result<EventHandle> RecordEvent(StreamHandle stream) override {
    cudaEvent_t e = nullptr;
    RESHARD_RETURN_NOT_OK(
        Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
              "cudaEventCreateWithFlags"));
    RESHARD_RETURN_NOT_OK(
        Check(cudaEventRecord(e, S(stream)), "cudaEventRecord"));
    return static_cast<EventHandle>(reinterpret_cast<uintptr_t>(e));
  }

  Result<bool> EventDone(EventHandle event) override {
    const cudaError_t e = cudaEventQuery(E(event));
    if (e == cudaErrorNotReady) return false;
    RESHARD_RETURN_NOT_OK(Check(e, "cudaEventQuery"));
    return true;
  }

  Status DestroyEvent(EventHandle event) override {
    return Check(cudaEventDestroy(E(event)), "cudaEventDestroy");
  }

  Status SynchronizeStream(StreamHandle stream) override {
    return Check(cudaStreamSynchronize(S(stream)), "cudaStreamSynchronize");
  }

  Status Copy3DAsync(const Copy3D& c, StreamHandle stream) override {
    cudaMemcpy3DParms p{};
    p.srcPtr =
        make_cudaPitchedPtr(c.src.ptr, c.src.pitch, c.src.xsize, c.src.ysize);
    p.srcPos = make_cudaPos(c.src_pos.x, c.src_pos.y, c.src_pos.z);
    p.dstPtr =
        make_cudaPitchedPtr(c.dst.ptr, c.dst.pitch, c.dst.xsize, c.dst.ysize);
    p.dstPos = make_cudaPos(c.dst_pos.x, c.dst_pos.y, c.dst_pos.z);
    p.extent = make_cudaExtent(c.extent.width, c.extent.height, c.extent.depth);
    p.kind = ToCuda(c.kind);
    return Check(cudaMemcpy3DAsync(&p, S(stream)), "cudaMemcpy3DAsync");
  }

  Status Copy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                     size_t width, size_t height, CopyKind kind,
                     StreamHandle stream) override {
    return Check(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                   ToCuda(kind), S(stream)),
                 "cudaMemcpy2DAsync");
  }

  Result<bool> CanAccessPeer(int device, int peer) override {
    int can = 0;
    RESHARD_RETURN_NOT_OK(Check(cudaDeviceCanAccessPeer(&can, device, peer),
                                "cudaDeviceCanAccessPeer"));
    return can != 0;
  }

  Status EnablePeerAccess(int device, int peer) override {
    RESHARD_RETURN_NOT_OK(Check(cudaSetDevice(device), "cudaSetDevice"));
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      return Status::OK();
    }
    return Check(e, "cudaDeviceEnablePeerAccess");
  }

  // The FP8 and delta kernels (convert_kernel_launch.h): each launch's
  // error, refusals of arguments left to the runtime (a bad pointer shows
  // as the kernel's error at the next synchronisation).
  Status LaunchCast(const CastArgs& args, StreamHandle stream) override {
    return Check(static_cast<cudaError_t>(LaunchCastKernel(args, V(stream))),
                 "cast kernel launch");
  }
  Status LaunchQuantizeE4m3(const QuantizeArgs& args,
                            StreamHandle stream) override {
    return Check(
        static_cast<cudaError_t>(LaunchQuantizeE4m3Kernel(args, V(stream))),
        "quantize kernel launch");
  }
  Status LaunchDequantizeE4m3(const DequantizeArgs& args,
                              StreamHandle stream) override {
    return Check(
        static_cast<cudaError_t>(LaunchDequantizeE4m3Kernel(args, V(stream))),
        "dequantize kernel launch");
  }
  Status LaunchDeltaEncode(const DeltaArgs& args,
                           StreamHandle stream) override {
    return Check(
        static_cast<cudaError_t>(LaunchDeltaEncodeKernel(args, V(stream))),
        "delta encode kernel launch");
  }
  Status LaunchDeltaApply(const DeltaArgs& args, StreamHandle stream) override {
    return Check(
        static_cast<cudaError_t>(LaunchDeltaApplyKernel(args, V(stream))),
        "delta apply kernel launch");
  }

  Status LaunchGatherScatter(const GatherScatterArgs& args,
                             StreamHandle stream) override {
    return Check(
        static_cast<cudaError_t>(LaunchGatherScatterKernel(
            args, reinterpret_cast<void*>(static_cast<uintptr_t>(stream)))),
        "gather/scatter kernel launch");
  }

  Result<AllocationRange> AllocationOf(const void* ptr) override {
    // The runtime has no call for it: the driver's, through the runtime's
    // entry-point query (no link against libcuda).
    using GetRange = int (*)(unsigned long long*, size_t*, unsigned long long);
    static GetRange get_range = [] {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
                                           cudaEnableDefault,
                                           &found) != cudaSuccess ||
          found != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        fn = nullptr;
      }
      return reinterpret_cast<GetRange>(fn);
    }();
    if (get_range == nullptr) {
      return Status::Internal("cuMemGetAddressRange: not found in the driver");
    }
    unsigned long long base = 0;
    size_t bytes = 0;
    const int e =
        get_range(&base, &bytes, reinterpret_cast<unsigned long long>(ptr));
    if (e != 0) {
      return Status::InvalidArgument("cuMemGetAddressRange: CUresult " +
                                     std::to_string(e) +
                                     " (not device memory)");
    }
    return AllocationRange{reinterpret_cast<void*>(base), bytes};
  }

  Result<IpcMemHandle> IpcGetMemHandle(void* base) override {
    cudaIpcMemHandle_t h{};
    RESHARD_RETURN_NOT_OK(
        Check(cudaIpcGetMemHandle(&h, base), "cudaIpcGetMemHandle"));
    IpcMemHandle out;
    static_assert(sizeof(h) == sizeof(out.bytes));
    std::memcpy(out.bytes, &h, sizeof(h));
    return out;
  }

  Result<void*> IpcOpenMemHandle(int device,
                                 const IpcMemHandle& handle) override {
    RESHARD_RETURN_NOT_OK(Check(cudaSetDevice(device), "cudaSetDevice"));
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, handle.bytes, sizeof(h));
    void* p = nullptr;
    RESHARD_RETURN_NOT_OK(
        Check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
              "cudaIpcOpenMemHandle"));
    return p;
  }

  Status IpcCloseMemHandle(void* ptr) override {
    return Check(cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle");
  }

  size_t MaxPitch() override {
    int device = 0, pitch = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, device) !=
            cudaSuccess) {
      return 2147483647;
    }
    return static_cast<size_t>(pitch);
  }
};

}  // namespace

Result<std::shared_ptr<DeviceApi>> RuntimeDeviceApi() {
  static const std::shared_ptr<DeviceApi> api =
      std::make_shared<CudaRuntimeApi>();
  return api;
}

}  // namespace reshard::cuda
