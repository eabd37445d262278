// The FP8 and delta kernels: the __host__ __device__ functions of
// convert_kernels.h, one launch per phase, grid-stride over the phase's
// items. Compiled without contraction into fused multiply-adds
// (--fmad=false, CMakeLists.txt), with IEEE division and denormals (nvcc's
// defaults), so that the arithmetic is the CPU's.
#include <cuda_runtime.h>

#include "exec_cuda/convert_kernel_launch.h"

namespace reshard::cuda {

namespace {

// The grid of thread (blockIdx.x, threadIdx.x) runs its items of `items`.
template <typename Item>
__device__ void Stride(uint64_t items, const Item& item) {
  ConvertGridStride(items, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x,
                    item);
}

__global__ void CastKernel(CastArgs a) {
  Stride(a.elements, [&](uint64_t i) { CastItem(a, i); });
}

__global__ void QuantizeKernel(QuantizeArgs a, int phase) {
  Stride(QuantizeItems(a, phase),
         [&](uint64_t i) { QuantizeItem(a, phase, i); });
}

__global__ void DequantizeKernel(DequantizeArgs a) {
  Stride(a.rows * a.cols, [&](uint64_t i) { DequantizeItem(a, i); });
}

__global__ void DeltaEncodeKernel(DeltaArgs a, int phase) {
  Stride(DeltaItems(a, phase),
         [&](uint64_t i) { DeltaEncodeItem(a, phase, i); });
}

__global__ void DeltaApplyKernel(DeltaArgs a, int phase) {
  Stride(DeltaItems(a, phase),
         [&](uint64_t i) { DeltaApplyItem(a, phase, i); });
}

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

unsigned Grid(uint64_t items) {
  return static_cast<unsigned>(ConvertBlocks(items));
}

}  // namespace

int LaunchCastKernel(const CastArgs& args, void* stream) {
  CastKernel<<<Grid(args.elements), kConvertThreads, 0, S(stream)>>>(args);
  return static_cast<int>(cudaGetLastError());
}

int LaunchQuantizeE4m3Kernel(const QuantizeArgs& args, void* stream) {
  for (int phase = 0; phase < kQuantizePhases; ++phase) {
    QuantizeKernel<<<Grid(QuantizeItems(args, phase)), kConvertThreads, 0,
                     S(stream)>>>(args, phase);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return 0;
}

int LaunchDequantizeE4m3Kernel(const DequantizeArgs& args, void* stream) {
  DequantizeKernel<<<Grid(args.rows * args.cols), kConvertThreads, 0,
                     S(stream)>>>(args);
  return static_cast<int>(cudaGetLastError());
}

int LaunchDeltaEncodeKernel(const DeltaArgs& args, void* stream) {
  for (int phase = 0; phase < kDeltaPhases; ++phase) {
    DeltaEncodeKernel<<<Grid(DeltaItems(args, phase)), kConvertThreads, 0,
                        S(stream)>>>(args, phase);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return 0;
}

int LaunchDeltaApplyKernel(const DeltaArgs& args, void* stream) {
  for (int phase = 0; phase < kDeltaPhases; ++phase) {
    DeltaApplyKernel<<<Grid(DeltaItems(args, phase)), kConvertThreads, 0,
                       S(stream)>>>(args, phase);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return 0;
}

}  // namespace reshard::cuda
